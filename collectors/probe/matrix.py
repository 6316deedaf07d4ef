"""Phase events from a whole traffic matrix — for jobs that know the matrix rather than each call
(the twin's simulated MoE job, replayed routing traces). Rank s's event carries row s as what it
sent and column s as what it received, so the server's matrices equal the input exactly.

    for event in events_from_matrix(m, step=3, layer=1, phase="dispatch", start_ns=t0, end_ns=t1):
        poster.submit(event)            # the probe's EventPoster: same client path, same API
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
) -> Iterator[dict[str, Any]]:
    """One event per rank of an N x N matrix (row = sender, column = receiver), bytes as ints."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}")
    m = np.asarray(bytes_matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError("bytes_matrix must be square")
    n = m.shape[0]
    # whole rows and columns to Python ints at once, maps zipped from shared keys: per-cell Python
    # indexing made this the twin's hottest code (its agents stalled behind it every report)
    whole = np.rint(m).astype(np.int64)
    rows, cols = whole.tolist(), whole.T.tolist()
    peers = [str(d) for d in range(n)]
    pg_ranks = list(range(n))
    for s in range(n):
        send = dict(zip(peers, rows[s], strict=True))
        recv = dict(zip(peers, cols[s], strict=True))
        yield {
            "id": f"{id_prefix}-{step}-{layer}-{phase}-{s}",
            "rank": s,
            "host": hosts[s] if hosts else "",
            "step": step,
            "layer": layer,
            "phase": phase,
            "collective": collective,
            "pg_ranks": pg_ranks,
            "start_ns": start_ns,
            "end_ns": end_ns,
            "send_bytes_per_peer": send,
            "recv_bytes_per_peer": recv,
            "source": source,
            "time_kind": time_kind,
        }
