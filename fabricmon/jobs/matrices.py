"""Per-(source, step, layer, phase) traffic matrices: rank×rank bytes sent and received, kept
current as events arrive (one scatter-add per batch, one SELECT and one multi-row statement
each for UPDATE and INSERT; matrices of many ranks through ``matrix_parts``), and summed for the
API and pages. On-demand readers call ``matrix_parts.settle(run)`` before reading a run's rows;
the live phase views sum rows and parts without writing (``matrix_read.window``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connection

from fabricmon.jobs import matrix_blobs, matrix_parts
from fabricmon.jobs.columns import (
    EventColumns,
)
from fabricmon.jobs.matrix_rows import insert_rows, key_filter, update_rows
from fabricmon.jobs.models import (
    Run,
    TrafficMatrix,
)
from fabricmon.jobs.sql import Deferred, sql_cursor

DENSE_MATRIX_CELLS = 8_000_000  # a batch's matrices are summed in one dense array up to this size
# Matrices of more cells than this (above 2,048 ranks) are never made dense, on ingest: summed as
# (cell, bytes) pairs and appended beside the stored row (``matrix_parts``). At 5,632 ranks a
# dense matrix is 254 MB, and merging each batch through them held SQLite's write lock 2-4.5 s a
# batch; merging the pairs into the row still rewrote ~11 MB a batch.
PAIRS_FROM_CELLS = 2048 * 2048


@dataclass(frozen=True)
class _PeerBytes:
    """A batch's per-peer bytes, flattened: entry i adds ``nbytes[i]`` to cell (src, dst) of the
    sent (kind 0) or received (kind 1) matrix of key ``kid[i]``; ranks are below ``n``."""

    kid: np.ndarray
    kind: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    n: int


def _peer_bytes(cols: EventColumns, inverse: np.ndarray) -> _PeerBytes | None:
    """Sender rows from the events' ``send`` maps, receiver columns from their ``recv`` maps."""
    s_ev, r_ev = cols.peer_event_index("send"), cols.peer_event_index("recv")
    if not len(s_ev) and not len(r_ev):
        return None
    src = np.concatenate([cols.rank[s_ev], cols.recv_peer])
    dst = np.concatenate([cols.send_peer, cols.rank[r_ev]])
    return _PeerBytes(
        kid=np.concatenate([inverse[s_ev], inverse[r_ev]]),
        kind=np.concatenate([np.zeros(len(s_ev), np.int64), np.ones(len(r_ev), np.int64)]),
        src=src,
        dst=dst,
        nbytes=np.concatenate([cols.send_bytes, cols.recv_bytes]),
        n=int(max(src.max(), dst.max())) + 1,
    )


class _DenseSums:
    """Every touched matrix summed in one (touched, 2, n, n) array: one scatter-add for the batch."""

    def __init__(self, peers: _PeerBytes, local: np.ndarray, touched: int) -> None:
        n = peers.n
        flat_index = ((local[peers.kid] * 2 + peers.kind) * n + peers.src) * n + peers.dst
        dense = np.zeros(touched * 2 * n * n, dtype=np.int64)
        # (bincount's weights are float64: add.at keeps the int64 byte counts exact)
        np.add.at(dense, flat_index, peers.nbytes)
        self.parts = dense.reshape(touched, 2, n, n)

    def part(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        return self.parts[j, 0], self.parts[j, 1]

    def stack(self, js: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Parts ``js`` as two (len(js), n, n) stacks: sent, received."""
        picked = self.parts[js]
        return picked[:, 0], picked[:, 1]


class _SortedSums:
    """Matrices too many or too big to sum densely: each summed on its own from one sort."""

    def __init__(self, peers: _PeerBytes, local: np.ndarray, touched: int) -> None:
        n = peers.n
        flat_index = ((local[peers.kid] * 2 + peers.kind) * n + peers.src) * n + peers.dst
        self.peers = peers
        self.order = np.argsort(flat_index, kind="stable")
        self.bounds = np.searchsorted(local[peers.kid][self.order], np.arange(touched + 1))

    def part(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        p, n = self.peers, self.peers.n
        sel = self.order[self.bounds[j] : self.bounds[j + 1]]
        m = np.zeros((2, n, n), dtype=np.int64)
        np.add.at(m, (p.kind[sel], p.src[sel], p.dst[sel]), p.nbytes[sel])
        return m[0], m[1]

    def stack(self, js: list[int]) -> tuple[np.ndarray, np.ndarray]:
        parts = [self.part(j) for j in js]
        return np.stack([a for a, _ in parts]), np.stack([b for _, b in parts])


def _blobs(sent: np.ndarray, received: np.ndarray) -> tuple[bytes, bytes]:
    return matrix_blobs.encode(sent), matrix_blobs.encode(received, same_as=sent)


def add_events(
    run: Run, cols: EventColumns, keys: list[tuple[str, int, int, str]], inverse: np.ndarray,
    deferred: Deferred | None = None,
) -> None:
    """Fold the new events' per-peer bytes into their (source, step, layer, phase) matrices: one
    scatter-add for the whole batch, one SELECT of the touched matrices, one multi-row statement each
    for UPDATE and INSERT (into ``deferred`` when given: sent with the block insert on PostgreSQL)."""
    peers = _peer_bytes(cols, inverse)
    if peers is None:
        return
    matrix_parts.lock(run)  # (PostgreSQL: concurrent batches of one run read, add and write rows)
    touched = np.flatnonzero(np.bincount(peers.kid, minlength=len(keys)))  # (sorted, as np.unique's)
    local = np.full(len(keys), -1, dtype=np.int64)
    local[touched] = np.arange(len(touched))
    calls = np.bincount(inverse[(cols.send_n > 0) | (cols.recv_n > 0)], minlength=len(keys))
    wanted = [keys[k] for k in touched.tolist()]
    deferred = deferred if deferred is not None else Deferred()
    ranks = max(peers.n, int(run.world_size or 0))  # (stored rows of a run are at most its world size)
    if ranks * ranks > PAIRS_FROM_CELLS:
        pairs = _PairSums(peers, local, len(touched))
        counts = calls[touched].tolist()
        cells = {key: matrix_parts.Cells(pairs.pairs(j, 0), pairs.pairs(j, 1), peers.n, counts[j])
                 for j, key in enumerate(wanted)}
        matrix_parts.add(run, cells, deferred)
        return
    dense = len(touched) * 2 * peers.n * peers.n <= DENSE_MATRIX_CELLS
    sums = (_DenseSums if dense else _SortedSums)(peers, local, len(touched))
    _write(run, wanted, calls[touched].tolist(), peers.n, sums, deferred=deferred)


def _write(
    run: Run, wanted: list[tuple[str, int, int, str]], calls: list[int], n: int,
    sums: _DenseSums | _SortedSums, *, deferred: Deferred,
) -> None:
    """Matrix ``j`` of ``wanted`` gets ``sums.part(j)`` and ``calls[j]`` more calls: added to the
    stored row (grown to ``n`` ranks) or inserted."""
    table = connection.ops.quote_name(TrafficMatrix._meta.db_table)
    with sql_cursor() as cursor:
        existing = _existing(cursor, table, run, wanted)
        updates, new = [], []
        for j, key in enumerate(wanted):
            old = existing.get(key)
            if old is None:
                new.append(j)
                continue
            part_sent, part_recv = sums.part(j)
            n_old = old[5]
            m = max(n_old, n)
            old_sent = matrix_blobs.decode(old[6], n_old)
            m_sent = _grown(old_sent, m)
            m_recv = _grown(matrix_blobs.decode(old[7], n_old, sent=old_sent), m)
            m_sent[:n, :n] += part_sent
            m_recv[:n, :n] += part_recv
            updates.append((m, *_blobs(m_sent, m_recv), old[8] + calls[j], old[0]))
        update_rows(cursor, updates, deferred)
        if not new:
            return
        blobs = matrix_blobs.encode_pairs(*sums.stack(new))
        insert_rows(cursor, run, [wanted[j] for j in new], n=n, blobs=blobs,
                    calls=np.array(calls, dtype=np.int64)[new], deferred=deferred)


class _PairSums:
    """A batch's matrices as sorted (cell, bytes) pairs, one run per (matrix, kind): no n×n array."""

    def __init__(self, peers: _PeerBytes, local: np.ndarray, touched: int) -> None:
        self.n = n = peers.n
        part = local[peers.kid] * 2 + peers.kind
        cell = peers.src * n + peers.dst
        order = np.lexsort((cell, part))
        part, cell, nbytes = part[order], cell[order], peers.nbytes[order]
        starts = np.flatnonzero(np.r_[True, (part[1:] != part[:-1]) | (cell[1:] != cell[:-1])])
        self.part_of = part[starts]
        self.cells = cell[starts].astype(np.int64)
        self.vals = np.add.reduceat(nbytes, starts) if len(starts) else np.zeros(0, np.int64)
        self.bounds = np.searchsorted(self.part_of, np.arange(2 * touched + 1))

    def pairs(self, j: int, kind: int) -> matrix_blobs.Pairs:
        a, b = self.bounds[2 * j + kind], self.bounds[2 * j + kind + 1]
        return self.cells[a:b], self.vals[a:b]


def _existing(cursor: Any, table: str, run: Run, wanted: list[tuple[str, int, int, str]]) -> dict[Any, Any]:
    """The stored rows of the ``wanted`` (source, step, layer, phase) keys, by key (one SELECT over
    the keys' step range and sources)."""
    where, params = key_filter(run, wanted)
    cursor.execute(f"SELECT id, source, step, layer, phase, n_ranks, sent, received, calls FROM {table} "
                   f"WHERE {where}", params)
    wanted_set = set(wanted)
    return {(r[1], r[2], r[3], r[4]): r for r in cursor.fetchall() if (r[1], r[2], r[3], r[4]) in wanted_set}


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
