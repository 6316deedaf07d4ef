"""Phase events from a whole traffic matrix — for jobs that know the matrix rather than each call
(the twin's simulated MoE job, replayed routing traces). Rank s's event carries row s as what it
sent and column s as what it received, so the server's matrices equal the input exactly.

    for event in events_from_matrix(m, step=3, layer=1, phase="dispatch", start_ns=t0, end_ns=t1):
        poster.submit(event)            # the probe's EventPoster: same client path, same API

A process group's matrix (an expert-parallel group's all-to-all) names its members' global ranks
with ``ranks``: row/column i is rank ``ranks[i]``, which is also the event's ``pg_ranks``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from collectors.traces.schema import PHASES


def events_from_matrix(
    bytes_matrix: Sequence[Sequence[float]] | Any,
    *,
    step: int,
    layer: int | None,
    phase: str,
    start_ns: int,
    end_ns: int,
    id_prefix: str,
    source: str = "twin",
    time_kind: str = "simulated",
    collective: str = "all_to_all_single",
    hosts: Sequence[str] | None = None,
    ranks: Sequence[int] | None = None,
) -> Iterator[dict[str, Any]]:
    """One event per rank of an N x N matrix (row = sender, column = receiver), bytes as ints.
    ``ranks``: the global rank of each row and column (default 0 … N−1); ``hosts`` is indexed by
    global rank."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}")
    m = np.asarray(bytes_matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError("bytes_matrix must be square")
    n = m.shape[0]
    if ranks is not None and len(ranks) != n:
        raise ValueError(f"ranks names {len(ranks)} ranks for a {n} x {n} matrix")
    # whole rows and columns to Python ints at once, as the per-pg-rank lists (no map per event:
    # per-cell Python indexing, then maps of 256 peers, were the twin's hottest code)
    whole = np.rint(m).astype(np.int64)
    rows, cols = whole.tolist(), whole.T.tolist()
    pg_ranks = list(range(n)) if ranks is None else [int(r) for r in ranks]
    for s, rank in enumerate(pg_ranks):
        yield {
            "id": f"{id_prefix}-{step}-{layer}-{phase}-{rank}",
            "rank": rank,
            "host": hosts[rank] if hosts else "",
            "step": step,
            "layer": layer,
            "phase": phase,
            "collective": collective,
            "pg_ranks": pg_ranks,
            "start_ns": start_ns,
            "end_ns": end_ns,
            "send_bytes_per_pg_rank": rows[s],
            "recv_bytes_per_pg_rank": cols[s],
            "source": source,
            "time_kind": time_kind,
        }
