"""Per-(source, step, layer, phase) traffic matrices: rank×rank bytes sent and received, kept
current as events arrive (one scatter-add per batch, one SELECT and one multi-row statement
each for UPDATE and INSERT), and summed for the API and pages.
"""

from __future__ import annotations

import numpy as np
from django.db import connection

from fabricmon.jobs.columns import (
    EventColumns,
)
from fabricmon.jobs.models import (
    Run,
    TrafficMatrix,
)
from fabricmon.jobs.sql import PG_TYPES, chunks, insert_many, marks, pg_cursor, sql_cursor

DENSE_MATRIX_CELLS = 8_000_000  # a batch's matrices are summed in one dense array up to this size


def add_events(
    run: Run, cols: EventColumns, keys: list[tuple[str, int, int, str]], inverse: np.ndarray
) -> None:
    """Fold the new events' per-peer bytes into their (source, step, layer, phase) matrices: one
    bincount for the whole batch, one SELECT of the touched matrices, one multi-row statement each for
    UPDATE and INSERT. (Sender rows come from ``send`` maps, receiver columns from ``recv``.)"""
    s_ev, r_ev = cols.peer_event_index("send"), cols.peer_event_index("recv")
    if not len(s_ev) and not len(r_ev):
        return
    kid = np.concatenate([inverse[s_ev], inverse[r_ev]])
    kind = np.concatenate([np.zeros(len(s_ev), np.int64), np.ones(len(r_ev), np.int64)])
    src = np.concatenate([cols.rank[s_ev], cols.recv_peer])
    dst = np.concatenate([cols.send_peer, cols.rank[r_ev]])
    nbytes = np.concatenate([cols.send_bytes, cols.recv_bytes])
    n = int(max(src.max(), dst.max())) + 1
    has_peers = np.zeros(len(keys), dtype=bool)
    has_peers[kid] = True
    calls = np.bincount(inverse[(cols.send_n > 0) | (cols.recv_n > 0)], minlength=len(keys))
    touched = np.flatnonzero(has_peers)
    # dense (touched, 2, n, n) when small; otherwise per-key from one sort
    local = np.full(len(keys), -1, dtype=np.int64)
    local[touched] = np.arange(len(touched))
    flat_index = ((local[kid] * 2 + kind) * n + src) * n + dst
    if len(touched) * 2 * n * n <= DENSE_MATRIX_CELLS:
        # (bincount's weights are float64: add.at keeps the int64 byte counts exact)
        dense = np.zeros(len(touched) * 2 * n * n, dtype=np.int64)
        np.add.at(dense, flat_index, nbytes)
        parts = dense.reshape(len(touched), 2, n, n)
        raw = parts.astype("<i8", copy=False).tobytes()  # every new matrix's blobs: slices of one buffer
        size = n * n * 8

        def part(j: int) -> tuple[np.ndarray, np.ndarray]:
            return parts[j, 0], parts[j, 1]

        def blobs(j: int) -> tuple[bytes, bytes]:
            return raw[2 * j * size : (2 * j + 1) * size], raw[(2 * j + 1) * size : (2 * j + 2) * size]
    else:
        order = np.argsort(flat_index, kind="stable")
        owner = local[kid][order]
        bounds = np.searchsorted(owner, np.arange(len(touched) + 1))

        def part(j: int) -> tuple[np.ndarray, np.ndarray]:
            sel = order[bounds[j] : bounds[j + 1]]
            m = np.zeros((2, n, n), dtype=np.int64)
            np.add.at(m, (kind[sel], src[sel], dst[sel]), nbytes[sel])
            return m[0], m[1]

        def blobs(j: int) -> tuple[bytes, bytes]:
            sent, received = part(j)
            return sent.astype("<i8").tobytes(), received.astype("<i8").tobytes()

    table = connection.ops.quote_name(TrafficMatrix._meta.db_table)
    run_id = run.pk
    wanted = [keys[k] for k in touched.tolist()]
    steps = [k[1] for k in wanted]
    sources = sorted({k[0] for k in wanted})
    with sql_cursor() as cursor:
        cursor.execute(
            f"SELECT id, source, step, layer, phase, n_ranks, sent, received, calls FROM {table} "
            f"WHERE run_id = %s AND step >= %s AND step <= %s "
            f"AND source IN ({', '.join(['%s'] * len(sources))})",
            [run.pk, min(steps), max(steps), *sources],
        )
        wanted_set = set(wanted)
        existing = {
            (r[1], r[2], r[3], r[4]): r for r in cursor.fetchall() if (r[1], r[2], r[3], r[4]) in wanted_set
        }
        updates, inserts = [], []
        calls_list = calls.tolist()
        for j, k in enumerate(touched.tolist()):
            key = keys[k]
            old = existing.get(key)
            if old is None:
                inserts.append((run_id, *key, n, *blobs(j), calls_list[k]))
                continue
            part_sent, part_recv = part(j)
            n_old = old[5]
            m = max(n_old, n)
            m_sent = _grown(np.frombuffer(bytes(old[6]), dtype="<i8").reshape(n_old, n_old), m)
            m_recv = _grown(np.frombuffer(bytes(old[7]), dtype="<i8").reshape(n_old, n_old), m)
            m_sent[:n, :n] += part_sent
            m_recv[:n, :n] += part_recv
            updates.append((m, m_sent.tobytes(), m_recv.tobytes(), old[8] + calls_list[k], old[0]))
        if updates and connection.vendor == "postgresql":
            cols_ = ("n_ranks", "sent", "received", "calls", "id")
            with pg_cursor() as pg:
                pg.execute(
                    f"UPDATE {table} SET n_ranks = v.n_ranks, sent = v.sent, received = v.received, "
                    f"calls = v.calls FROM unnest({', '.join(f'%b::{PG_TYPES[c]}[]' for c in cols_)}) "
                    f"AS v({', '.join(cols_)}) WHERE {table}.id = v.id",
                    [list(col) for col in zip(*updates, strict=True)],
                )
            updates = []
        for rows in chunks(updates):  # one statement per chunk: per-row statements cost ~50 µs on PG
            cursor.execute(
                f"UPDATE {table} SET n_ranks = v.column1, sent = v.column2, received = v.column3, "
                f"calls = v.column4 FROM (VALUES {marks(len(rows), 5)}) AS v WHERE {table}.id = v.column5",
                [x for row in rows for x in row],
            )
        insert_many(
            cursor,
            table,
            ("run_id", "source", "step", "layer", "phase", "n_ranks", "sent", "received", "calls"),
            inserts,
        )


def _grown(a: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n, n), dtype="<i8")
    out[: a.shape[0], : a.shape[1]] = a
    return out


def sum_matrices(matrices: list[TrafficMatrix]) -> tuple[list[list[int]], list[list[int]]]:
    """Element-wise sum of several matrices (e.g. all steps of one layer and phase) as lists."""
    if not matrices:
        return [], []
    n = max(m.n_ranks for m in matrices)
    sent, received = np.zeros((n, n), dtype=np.int64), np.zeros((n, n), dtype=np.int64)
    for m in matrices:
        sent += _grown(m.sent_array(), n)
        received += _grown(m.received_array(), n)
    return sent.tolist(), received.tolist()
