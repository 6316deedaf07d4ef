"""A small MoE job's phase events as NDJSON (what the probe posts): ``world`` ranks, per step and
layer a dispatch then a combine of ``phase_ms``; every rank's end of one collective coincides (the
last peer's data arrives at all ranks at once) unless its host clock is skewed."""

from __future__ import annotations

import json

PHASES = ("dispatch", "combine")
GAP_MS = 100  # one phase starts every 100 ms


def phase_ndjson(
    t0_ns: int,
    *,
    world: int = 4,
    steps: int = 3,
    layers: int = 2,
    phase_ms: int = 40,
    first_step: int = 0,
    skew_ns_by_rank: dict[int, int] | None = None,
) -> bytes:
    """NDJSON lines; ``t0_ns`` is the first phase's start on the true clock."""
    skew = skew_ns_by_rank or {}
    lines = []
    for s in range(first_step, first_step + steps):
        for layer in range(layers):
            for k, phase in enumerate(PHASES):
                i = ((s - first_step) * layers + layer) * len(PHASES) + k
                start = t0_ns + i * GAP_MS * 1_000_000
                end = start + phase_ms * 1_000_000
                for rank in range(world):
                    lines.append(
                        json.dumps(
                            {
                                "id": f"s{s}-l{layer}-{phase}-r{rank}",
                                "rank": rank,
                                "step": s,
                                "layer": layer,
                                "phase": phase,
                                "collective": "all_to_all",
                                "source": "probe",
                                "start_ns": start
                                + rank * 1_000_000
                                + skew.get(rank, 0),  # ranks enter at different times
                                "end_ns": end + skew.get(rank, 0),
                            }
                        )
                    )
    return ("\n".join(lines) + "\n").encode()


def post_through_probe(client, run_id: int, events) -> None:  # type: ignore[no-untyped-def]
    """Post events the way a job does — the probe's background poster, clock exchange included —
    and insist every one of them was taken."""
    from collectors.probe import EventPoster

    poster = EventPoster(client, run_id, batch_size=2_000, max_buffer=1 << 22, max_buffer_bytes=1 << 36,
                         measure_clock=True)
    for ev in events:
        poster.submit(ev)
    stats = poster.close(timeout_s=300)
    assert stats.posted > 0 and stats.rejected == 0 and stats.dropped == 0, stats
