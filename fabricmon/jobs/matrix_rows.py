"""The SQL that writes ``TrafficMatrix`` rows (and ``MatrixPart`` rows, the same columns), for both
writers (``matrices`` merging small matrices in place, ``matrix_parts`` appending and folding
parts of large ones): multi-row statements on the ingest path's own cursor, into the batch's
``Deferred`` on PostgreSQL; and the WHERE clause that finds a batch's keys' rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from django.db import connection, models

from fabricmon.jobs.models import Run, TrafficMatrix
from fabricmon.jobs.sql import PG_TYPES, Deferred, chunks, insert_columns, marks, pg_arrays

Key = tuple[str, int, int, str]  # (source, step, layer, phase)


def _table(model: type[models.Model] = TrafficMatrix) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def key_filter(run: Run, keys: list[Key]) -> tuple[str, list[Any]]:
    """A WHERE clause narrowing a matrix table to the keys' steps and sources, and its parameters
    (the rows it returns are then matched to the keys in Python)."""
    steps = [k[1] for k in keys]
    sources = sorted({k[0] for k in keys})
    return (f"run_id = %s AND step >= %s AND step <= %s AND source IN ({', '.join(['%s'] * len(sources))})",
            [run.pk, min(steps), max(steps), *sources])


def insert_rows(
    cursor: Any, run: Run, keys: list[Key], *, n: int | Sequence[int],
    blobs: list[tuple[bytes, bytes]], calls: np.ndarray, deferred: Deferred,
    model: type[models.Model] = TrafficMatrix,
) -> None:
    """New rows of ``model``: one per (source, step, layer, phase) key, ``n`` ranks (one for all,
    or each row's), its (sent, received) blobs."""
    source, step, layer, phase = zip(*keys, strict=True)
    insert_columns(
        cursor,
        _table(model),
        ("run_id", "source", "step", "layer", "phase", "n_ranks", "sent", "received", "calls"),
        [np.full(len(keys), run.pk), list(source), np.array(step, dtype=np.int64),
         np.array(layer, dtype=np.int64), list(phase),
         np.broadcast_to(np.asarray(n, dtype=np.int64), len(keys)), [b[0] for b in blobs],
         [b[1] for b in blobs], calls],
        deferred,
    )


def update_rows(cursor: Any, updates: list[tuple[Any, ...]], deferred: Deferred) -> None:
    """(n_ranks, sent, received, calls, id) rows: on PostgreSQL one ``unnest`` of binary arrays
    (deferred: sent with the block insert), on SQLite one statement per 500 rows (per-row
    statements cost ~50 µs on PG)."""
    table = _table()
    if updates and connection.vendor == "postgresql":
        cols_ = ("n_ranks", "sent", "received", "calls", "id")
        deferred.execute(
            f"UPDATE {table} SET n_ranks = v.n_ranks, sent = v.sent, received = v.received, "
            f"calls = v.calls FROM unnest({', '.join(f'%b::{PG_TYPES[c]}[]' for c in cols_)}) "
            f"AS v({', '.join(cols_)}) WHERE {table}.id = v.id",
            pg_arrays(cols_, list(zip(*updates, strict=True))),
        )
        return
    for rows in chunks(updates):
        cursor.execute(
            f"UPDATE {table} SET n_ranks = v.column1, sent = v.column2, received = v.column3, "
            f"calls = v.column4 FROM (VALUES {marks(len(rows), 5)}) AS v WHERE {table}.id = v.column5",
            [x for row in rows for x in row],
        )
