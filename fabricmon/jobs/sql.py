"""The ingest path's own SQL, on Django's connection and in its transaction.

Django's cursor wrapper runs a regex over every statement and copies its parameters (~0.3 µs an
event on the ingest path, for 1,000-placeholder statements), and the ORM costs ~50 µs per object;
here statements go to the driver's cursor directly: on SQLite with ``%s`` turned into ``?``, on
PostgreSQL as psycopg binary parameters (arrays, bytea) instead of quoted literals.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db import connection


def pg_cursor() -> Any:
    """A server-side-binding psycopg cursor on Django's connection (same transaction): arrays and
    bytea travel as binary parameters instead of quoted literals (Django's cursors quote)."""
    import psycopg  # noqa: PLC0415  (PostgreSQL only)

    connection.ensure_connection()
    return psycopg.Cursor(connection.connection)


class QmarkCursor:
    """SQLite: the driver's own cursor on Django's connection (same transaction), ``%s`` turned
    into ``?`` with str.replace. Django's cursor wrapper runs a regex over every statement and
    copies its parameters (~0.3 µs an event on the ingest path, for 1,000-placeholder statements)."""

    def __init__(self) -> None:
        connection.ensure_connection()
        self.cursor = connection.connection.cursor()

    def __enter__(self) -> QmarkCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cursor.close()

    def execute(self, sql: str, params: Any = ()) -> QmarkCursor:
        self.cursor.execute(sql.replace("%s", "?"), params)
        return self

    def fetchall(self) -> list[Any]:
        return self.cursor.fetchall()

    def fetchone(self) -> Any:
        return self.cursor.fetchone()


def sql_cursor() -> Any:
    """A cursor for the ingest path's own SQL (``%s`` parameters) on either database."""
    return connection.cursor() if connection.vendor == "postgresql" else QmarkCursor()


# PostgreSQL types of the columns written with unnest(array, …)
PG_TYPES = {
    "run_id": "bigint",
    "block_id": "bigint",
    "source": "text",
    "step": "bigint",
    "layer": "integer",
    "phase": "text",
    "events": "integer",
    "n_ranks": "integer",
    "sent": "bytea",
    "received": "bytea",
    "calls": "integer",
    "id": "bigint",
}


def chunks(rows: list[tuple[Any, ...]], size: int = 500) -> Iterator[list[tuple[Any, ...]]]:
    for i in range(0, len(rows), size):
        yield rows[i : i + size]


def marks(n_rows: int, n_cols: int) -> str:
    row = "(" + ", ".join(["%s"] * n_cols) + ")"
    return ", ".join([row] * n_rows)


def insert_many(cursor: Any, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """Multi-row INSERT: on PostgreSQL one ``unnest`` of one array per column (``%b``: arrays
    dumped in binary — the text dumper regex-checks and escapes every element); on SQLite a
    VALUES list of 500 rows a statement through the driver's cursor (executemany is a statement
    per row; a JSON parameter read by json_each measured ~0.7 µs a row slower for these rows)."""
    if not rows:
        return
    if connection.vendor == "postgresql":
        arrays = ", ".join(f"%b::{PG_TYPES[c]}[]" for c in columns)
        with pg_cursor() as pg:
            pg.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) SELECT * FROM unnest({arrays})",
                [list(col) for col in zip(*rows, strict=True)],
            )
        return
    for part in chunks(rows):
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES {marks(len(part), len(columns))}",
            [x for row in part for x in row],
        )
