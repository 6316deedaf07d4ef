"""Long runs for tests and benches: the events of an MoE job (ranks × steps × layers × dispatch,
combine) stored through the real ingest path (``ingest.store_columns``: id claims, block, index,
matrices), built as columns so a 1 M-event run takes seconds, not minutes of NDJSON."""

from __future__ import annotations

import numpy as np

from fabricmon.jobs import ingest
from fabricmon.jobs.columns import PHASE_CODE, SOURCE_CODE, TIME_KIND_CODE, EventColumns
from fabricmon.jobs.models import Run

T0_NS = 1_795_987_668_000_000_000
PHASE_MS = 4  # each all-to-all lasts 4 ms; a layer is dispatch then combine, 10 ms apart


def moe_columns(
    first: int, n: int, ranks: int, layers: int = 8, t0_ns: int = T0_NS, *, peers: bool = False
) -> EventColumns:
    """Events ``first .. first+n`` of the job, in call order: call c = (step, layer, phase) is
    reported by every rank, rank r entering r·10 µs late (a real job's skew). With ``peers``,
    each event also says how many bytes it sent to every rank (so the run gets traffic matrices)."""
    i = np.arange(first, first + n, dtype=np.int64)
    rank, call = i % ranks, i // ranks
    phase = np.where(call % 2 == 0, PHASE_CODE["dispatch"], PHASE_CODE["combine"]).astype(np.int64)
    start = t0_ns + call * 10_000_000 + rank * 10_000
    none = np.full(n, -1, np.int64)
    zeros = np.zeros(n, np.int64)
    empty = np.zeros(0, np.int64)
    send_n, send_peer, send_bytes = none, empty, empty
    if peers:
        send_n = np.full(n, ranks, np.int64)
        send_peer = np.tile(np.arange(ranks, dtype=np.int64), n)
        send_bytes = np.full(n * ranks, 4096, np.int64)
    return EventColumns(
        event_id=[f"lr{k}" for k in i.tolist()],
        rank=rank, step=call // (2 * layers), layer=(call // 2) % layers, seq=call + 1, phase=phase,
        source=np.full(n, SOURCE_CODE["probe"], np.int64),
        time_kind=np.full(n, TIME_KIND_CODE["host_call"], np.int64),
        start_ns=start, end_ns=start + PHASE_MS * 1_000_000, clock_offset_ns=zeros,
        bytes_sent=np.full(n, 1 << 20, np.int64), bytes_recv=none, send_n=send_n, recv_n=none,
        send_peer=send_peer, send_bytes=send_bytes, recv_peer=empty, recv_bytes=empty,
        collective=["all_to_all_single"] * n, pg=["0"] * n, pg_ranks=[""] * n, host=[""] * n,
    )


def fill_run(
    run: Run, events: int, ranks: int, per_block: int = 1000, *, first: int = 0, peers: bool = False
) -> None:
    """Store events ``first .. first+events`` of the job on ``run``, ``per_block`` a batch (as a
    probe posts)."""
    for at in range(first, first + events, per_block):
        n = min(per_block, first + events - at)
        result = ingest.store_columns(run, moe_columns(at, n, ranks, peers=peers))
        assert result.stored == n, result
