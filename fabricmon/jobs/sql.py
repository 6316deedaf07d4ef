"""The ingest path's own SQL, on Django's connection and in its transaction.

Django's cursor wrapper runs a regex over every statement and copies its parameters (~0.3 µs an
event on the ingest path, for 1,000-placeholder statements), and the ORM costs ~50 µs per object;
here statements go to the driver's cursor directly: on SQLite with ``%s`` turned into ``?``, on
PostgreSQL as psycopg binary parameters (arrays, bytea) instead of quoted literals.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from django.db import connection


class PgArray:
    """A 1-D numpy integer array as one binary PostgreSQL array parameter (``%b::bigint[]``),
    encoded by numpy in one pass: psycopg's list dumper costs ~1 µs an element in Python (a
    batch's 1,000 id hashes were ~1 ms of the ingest's client CPU)."""

    __slots__ = ("data", "oid")
    # element type → (element oid, array oid, big-endian dtype)
    TYPES = {"bigint": (20, 1016, ">i8"), "integer": (23, 1007, ">i4")}

    def __init__(self, values: Any, pg_type: str = "bigint") -> None:
        element_oid, self.oid, dtype = self.TYPES[pg_type]
        a = np.asarray(values, dtype=np.int64).reshape(-1)
        # array_send's layout: ndim, has-nulls, element oid, (length, lower bound), then each
        # element as (its byte length, its value)
        cells = np.empty(len(a), dtype=[("len", ">i4"), ("value", dtype)])
        cells["len"] = np.dtype(dtype).itemsize
        cells["value"] = a
        self.data = _array_head(element_oid, len(a)) + cells.tobytes()


class PgValues:
    """A list of ``bytes`` or ``str`` as one binary ``bytea[]`` / ``text[]`` parameter, laid out
    with one join (psycopg's list dumper looks a dumper up and calls it for every element in
    Python: a batch's 250 matrix blobs and 250 key names were ~0.3 µs an event)."""

    __slots__ = ("data", "oid")
    TYPES = {"bytea": (17, 1001), "text": (25, 1009)}

    def __init__(self, values: Sequence[Any], pg_type: str) -> None:
        element_oid, self.oid = self.TYPES[pg_type]
        raw = [v.encode() for v in values] if pg_type == "text" else list(values)
        lengths = np.fromiter(map(len, raw), dtype=">i4", count=len(raw)).view(np.uint8).reshape(-1, 4)
        self.data = _array_head(element_oid, len(raw)) + b"".join(
            [part for pair in zip(map(bytes, lengths), raw, strict=True) for part in pair])


def _array_head(element_oid: int, n: int) -> bytes:
    return struct.pack(">iiiii", 1, 0, element_oid, n, 1) if n else struct.pack(">iii", 0, 0, element_oid)


def _dumpers() -> list[tuple[type, type]]:
    from psycopg.adapt import Dumper  # noqa: PLC0415  (PostgreSQL only)
    from psycopg.pq import Format  # noqa: PLC0415

    class _BinaryArray(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            return obj.data  # type: ignore[no-any-return]

        def get_key(self, obj: Any, format: Any) -> Any:
            return (type(obj), obj.oid)  # one dumper per array type: its oid is in the message

        def upgrade(self, obj: Any, format: Any) -> Any:
            dumper = _BinaryArray(type(obj), self.connection)
            dumper.oid = obj.oid
            return dumper

    return [(PgArray, _BinaryArray), (PgValues, _BinaryArray)]


def _prepared_cursor() -> type:
    import psycopg  # noqa: PLC0415  (PostgreSQL only)

    class PreparedCursor(psycopg.Cursor):  # type: ignore[type-arg]
        """Prepares each statement on its first execution (psycopg keeps the last 100 per connection)."""

        def execute(self, query: Any, params: Any = None, *, prepare: bool | None = True, **kw: Any) -> Any:
            return super().execute(query, params, prepare=prepare, **kw)

    return PreparedCursor


def pg_cursor() -> Any:
    """A server-side-binding psycopg cursor on Django's connection (same transaction): arrays and
    bytea travel as binary parameters instead of quoted literals (Django's cursors quote), and
    every statement is prepared on first use (Django's connections set ``prepare_threshold`` to
    None: parsing, analysing and planning the ingest's statements again each batch was ~18 % of
    the backend's CPU)."""
    global _PREPARED  # noqa: PLW0603  (made on first use: psycopg is imported only for PostgreSQL)
    connection.ensure_connection()
    raw = connection.connection
    if not getattr(raw, "_fabricmon_arrays", False):
        for cls, dumper in _dumpers():
            raw.adapters.register_dumper(cls, dumper)
        raw._fabricmon_arrays = True
    if _PREPARED is None:
        _PREPARED = _prepared_cursor()
    return _PREPARED(raw)


_PREPARED: type | None = None


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
    """A cursor for the ingest path's own SQL (``%s`` parameters) on either database: psycopg's
    own on PostgreSQL (server-side binding, so a statement run every batch is prepared once per
    connection), the driver's on SQLite."""
    return pg_cursor() if connection.vendor == "postgresql" else QmarkCursor()


# PostgreSQL types of the columns written with unnest(array, …)
PG_TYPES = {
    "run_id": "bigint",
    "block_id": "bigint",
    "source": "text",
    "step": "bigint",
    "layer": "integer",
    "layer_min": "integer",
    "layer_max": "integer",
    "phases": "integer",
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


def pg_arrays(columns: tuple[str, ...], values: Sequence[Any]) -> list[Any]:
    """One binary PostgreSQL array parameter per column: integer columns (numpy arrays or lists)
    as ``PgArray``, text and bytea columns as ``PgValues``."""
    out: list[Any] = []
    for name, col in zip(columns, values, strict=True):
        kind = PG_TYPES[name]
        out.append(PgArray(col, kind) if kind in PgArray.TYPES else PgValues(col, kind))
    return out


class Deferred:
    """Statements of one batch whose answer nobody reads (the matrices' INSERT and UPDATE): on
    PostgreSQL kept, and sent as data-modifying CTEs of the batch's block insert (a statement's
    round trip was ~0.3 µs an event of client and backend CPU at 1,000 events a batch); on
    SQLite (no round trips) run at once."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, list[Any]]] = []

    def execute(self, sql: str, params: Sequence[Any]) -> None:
        if connection.vendor == "postgresql":
            self.statements.append((sql, list(params)))
            return
        with QmarkCursor() as cursor:
            cursor.execute(sql, params)

    def flush(self) -> None:
        """Run the kept statements one by one (a writer with no block insert to carry them)."""
        if self.statements:
            with pg_cursor() as pg:
                for sql, params in self.statements:
                    pg.execute(sql, params)
            self.statements = []

    def ctes(self) -> tuple[str, list[Any]]:
        """``, _w0 AS (…), _w1 AS (…)`` and their parameters, in order."""
        sql = "".join(f", _w{i} AS ({stmt})" for i, (stmt, _) in enumerate(self.statements))
        return sql, [p for _, params in self.statements for p in params]


def insert_columns(
    cursor: Any, table: str, columns: tuple[str, ...], values: Sequence[Any], deferred: Deferred | None = None
) -> None:
    """Multi-row INSERT of column-wise values (one sequence or numpy array per column, equal
    lengths): on PostgreSQL one ``unnest`` of one binary array per column (into ``deferred``
    when given); on SQLite rows of the driver's cursor, as ``insert_many``."""
    if not len(values[0]):
        return
    if connection.vendor == "postgresql":
        arrays = ", ".join(f"%b::{PG_TYPES[c]}[]" for c in columns)
        sql = f"INSERT INTO {table} ({', '.join(columns)}) SELECT * FROM unnest({arrays})"
        if deferred is not None:
            deferred.execute(sql, pg_arrays(columns, values))
            return
        with pg_cursor() as pg:
            pg.execute(sql, pg_arrays(columns, values))
        return
    plain = [v.tolist() if isinstance(v, np.ndarray) else v for v in values]
    insert_many(cursor, table, columns, list(zip(*plain, strict=True)))


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
                pg_arrays(columns, list(zip(*rows, strict=True))),
            )
        return
    for part in chunks(rows):
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES {marks(len(part), len(columns))}",
            [x for row in part for x in row],
        )
