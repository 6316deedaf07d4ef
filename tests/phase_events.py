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
