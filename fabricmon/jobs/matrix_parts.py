"""Traffic matrices of many ranks: a batch's bytes are appended, not merged into the stored row.

A matrix above ``matrices.PAIRS_FROM_CELLS`` cells (more than 2,048 ranks) is kept as (cell,
bytes) pairs. Merging every batch into its stored row rewrote the whole row each time: a
5,632-rank job's (step, layer, phase) matrix is ~11 MB a blob, a batch of ~300 events adds 1/17
of it, so one phase wrote ~17 growing copies (and a job whose ranks post their own events, 5,632
copies): 747 µs an event, three quarters of it SQLite writing those rows.

Here a batch's cells for a key whose row exists become a ``MatrixPart`` row (written once, never
read back by ingest), and a key's parts are folded into its row when they would reach
``FOLD_RATIO`` times the row's size — so each row is rewritten O(log) times as it grows, about 1.3
times its final size in all. The live phase views read a row and its parts and sum them
(``matrix_read.window``), writing nothing; the on-demand readers (matrix API, exports, What-if,
retention) call ``settle(run)`` first and then read ``TrafficMatrix`` rows as before.

Folding reads a key's row and parts and replaces them, so it runs under a per-run lock (``lock``):
SQLite's write transaction is ``BEGIN IMMEDIATE``; on PostgreSQL a transaction-scoped advisory
lock, so two batches of one run cannot both fold the same parts (or both insert a key's first
row). ``matrices.add_events`` takes it for both paths.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connection, transaction

from fabricmon.jobs import matrix_blobs
from fabricmon.jobs.matrix_blobs import Pairs
from fabricmon.jobs.matrix_rows import Key, insert_rows, key_filter, update_rows
from fabricmon.jobs.models import MatrixPart, Run, TrafficMatrix
from fabricmon.jobs.sql import Deferred, sql_cursor

_LOCK_SPACE = 0x464D4D50 << 32  # "FMMP": this module's advisory locks, one per run
SETTLE_KEYS = 8  # keys folded per transaction by ``settle`` (memory: a key's row and parts)
# A key's parts are folded in on ingest when they would reach this many times its row's size: each
# fold rewrites the row (SQLite: ~90 MB/s of rewritten row here), so the fewer the better, and
# a reader's settle reads at most this many times the row in parts. At 3, a row grows 4x a fold.
FOLD_RATIO = 3


@dataclass(frozen=True)
class Cells:
    """One key's new bytes: sent and received (cell, bytes) pairs of an ``n``-rank matrix."""

    sent: Pairs
    received: Pairs
    n: int
    calls: int

    @property
    def size(self) -> int:
        """About the bytes its blobs will take (4-byte cells and values)."""
        return 8 * (len(self.sent[0]) + len(self.received[0]))


def lock(run: Run) -> None:
    """Hold the run's matrix lock until the transaction ends (PostgreSQL; SQLite's write
    transaction already excludes every other writer). Every writer of a run's matrices takes it:
    they read a row, add to it and write it back (or insert a key's first row), and two batches
    of one run doing that at once lost one's bytes or failed on the unique key."""
    if connection.vendor == "postgresql":
        with sql_cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_SPACE | (int(run.pk) & 0xFFFFFFFF)])


def add(run: Run, new: dict[Key, Cells], deferred: Deferred) -> None:
    """Add a batch's cells: appended as parts where the key's row exists and its parts stay
    smaller than it, folded into the row (with its parts) otherwise. The caller holds ``lock``."""
    keys = list(new)
    with sql_cursor() as cursor:
        rows = _row_sizes(cursor, run, keys)
        staged = _part_sizes(cursor, run, keys)
        parts = [k for k in keys if k in rows and staged.get(k, 0) + new[k].size < FOLD_RATIO * rows[k][3]]
        fold = [k for k in keys if k not in set(parts)]
        _insert_parts(cursor, run, {k: new[k] for k in parts}, deferred)
        if fold:
            _fold(cursor, run, fold, rows, new={k: new[k] for k in fold}, deferred=deferred)


def settle(run: Run) -> int:
    """Fold every part of the run into its matrix rows (readers call this before reading them);
    returns how many parts were folded. A run without parts costs one indexed query."""
    parts = MatrixPart.objects.filter(run_id=run.pk)
    keys = sorted(parts.values_list("source", "step", "layer", "phase").order_by().distinct())
    folded = 0
    for at in range(0, len(keys), SETTLE_KEYS):
        chunk = [(str(s), int(st), int(la), str(ph)) for s, st, la, ph in keys[at: at + SETTLE_KEYS]]
        with transaction.atomic():
            lock(run)
            deferred = Deferred()
            with sql_cursor() as cursor:
                folded += _fold(cursor, run, chunk, _row_sizes(cursor, run, chunk), new={}, deferred=deferred)
            deferred.flush()
    return folded


# --- reading sizes and blobs --------------------------------------------------------------------


def _row_sizes(cursor: Any, run: Run, keys: list[Key]) -> dict[Key, tuple[int, int, int, int]]:
    """The stored rows of ``keys``: key → (id, n_ranks, calls, bytes of both blobs); no blob is
    read (length() comes from the record header on SQLite, the TOAST pointer on PostgreSQL)."""
    where, params = key_filter(run, keys)
    table = connection.ops.quote_name(TrafficMatrix._meta.db_table)
    cursor.execute(f"SELECT id, source, step, layer, phase, n_ranks, calls, length(sent) + length(received) "
                   f"FROM {table} WHERE {where}", params)
    wanted = set(keys)
    out = {}
    for r in cursor.fetchall():
        key = (r[1], int(r[2]), int(r[3]), r[4])
        if key in wanted:
            out[key] = (int(r[0]), int(r[5]), int(r[6]), int(r[7]))
    return out


def _part_sizes(cursor: Any, run: Run, keys: list[Key]) -> dict[Key, int]:
    where, params = key_filter(run, keys)
    table = connection.ops.quote_name(MatrixPart._meta.db_table)
    cursor.execute(f"SELECT source, step, layer, phase, length(sent) + length(received) FROM {table} "
                   f"WHERE {where}", params)
    wanted = set(keys)
    out: dict[Key, int] = defaultdict(int)
    for r in cursor.fetchall():
        key = (r[0], int(r[1]), int(r[2]), r[3])
        if key in wanted:
            out[key] += int(r[4])
    return out


def _pieces(sent_blob: Any, recv_blob: Any, n: int) -> tuple[Pairs, Pairs]:
    sent = matrix_blobs.decode_pairs(sent_blob, n)
    return sent, matrix_blobs.decode_pairs(recv_blob, n, sent=sent)


# --- writing --------------------------------------------------------------------------------------


def _insert_parts(cursor: Any, run: Run, cells: dict[Key, Cells], deferred: Deferred) -> None:
    if not cells:
        return
    blobs = [(matrix_blobs.encode_from_pairs(*c.sent, c.n),
              matrix_blobs.encode_from_pairs(*c.received, c.n, same_as=c.sent)) for c in cells.values()]
    insert_rows(cursor, run, list(cells), n=[c.n for c in cells.values()], blobs=blobs,
                calls=np.array([c.calls for c in cells.values()], dtype=np.int64), deferred=deferred,
                model=MatrixPart)


def _fold(
    cursor: Any, run: Run, keys: list[Key], rows: dict[Key, tuple[int, int, int, int]], *,
    new: dict[Key, Cells], deferred: Deferred,
) -> int:
    """Each key's row, parts and ``new`` cells summed into its row (updated, or inserted when it
    has none); the parts are deleted. Returns the number of parts folded."""
    pieces: dict[Key, list[tuple[Pairs, Pairs, int]]] = defaultdict(list)
    calls: dict[Key, int] = defaultdict(int)
    row_ids = [rows[k][0] for k in keys if k in rows]
    if row_ids:
        table = connection.ops.quote_name(TrafficMatrix._meta.db_table)
        cursor.execute(f"SELECT id, n_ranks, sent, received FROM {table} "
                       f"WHERE id IN ({', '.join(['%s'] * len(row_ids))})", row_ids)
        by_id = {int(r[0]): r for r in cursor.fetchall()}
        rows = {k: v for k, v in rows.items() if v[0] in by_id}  # (a row deleted since: inserted anew)
        for k in keys:
            if k in rows:
                _, n, row_calls, _ = rows[k]
                r = by_id[rows[k][0]]
                pieces[k].append((*_pieces(r[2], r[3], n), n))
                calls[k] += row_calls
    where, params = key_filter(run, keys)
    ptable = connection.ops.quote_name(MatrixPart._meta.db_table)
    cursor.execute(f"SELECT id, source, step, layer, phase, n_ranks, sent, received, calls FROM {ptable} "
                   f"WHERE {where}", params)
    wanted, part_ids = set(keys), []
    for r in cursor.fetchall():
        key = (r[1], int(r[2]), int(r[3]), r[4])
        if key in wanted:
            part_ids.append(int(r[0]))
            pieces[key].append((*_pieces(r[6], r[7], int(r[5])), int(r[5])))
            calls[key] += int(r[8])
    for k, c in new.items():
        pieces[k].append((c.sent, c.received, c.n))
        calls[k] += c.calls
    updates, inserts = [], []
    for k in keys:
        m = max(n for _, _, n in pieces[k])
        sent = _summed([(s, n) for s, _, n in pieces[k]], m)
        recv = _summed([(r, n) for _, r, n in pieces[k]], m)
        blobs = (matrix_blobs.encode_from_pairs(*sent, m),
                 matrix_blobs.encode_from_pairs(*recv, m, same_as=sent))
        if k in rows:
            updates.append((m, *blobs, calls[k], rows[k][0]))
        else:
            inserts.append((k, m, blobs, calls[k]))
    update_rows(cursor, updates, deferred)
    if inserts:
        insert_rows(cursor, run, [i[0] for i in inserts], n=[i[1] for i in inserts],
                    blobs=[i[2] for i in inserts], calls=np.array([i[3] for i in inserts], dtype=np.int64),
                    deferred=deferred)
    if part_ids:
        cursor.execute(f"DELETE FROM {ptable} WHERE id IN ({', '.join(['%s'] * len(part_ids))})", part_ids)
    return len(part_ids)


def _summed(pieces: list[tuple[Pairs, int]], m: int) -> Pairs:
    """Pair sets of n-rank matrices (each its own n) added as one m-rank matrix's pairs."""
    cells = np.concatenate([c // n * m + c % n for (c, _), n in pieces])
    vals = np.concatenate([v for (_, v), _ in pieces])
    if not len(cells):
        return cells.astype(np.int64), vals.astype(np.int64)
    order = np.argsort(cells, kind="stable")
    cells, vals = cells[order], vals[order]
    starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
    return cells[starts], np.add.reduceat(vals, starts)
