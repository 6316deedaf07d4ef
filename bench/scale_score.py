"""Scoring the 16k-port run (pure functions, unit-tested in tests/bench/test_scale_score.py): CPU
per port-second of each stage from /proc tick samples, counter→pixel latency from the page's draw
log, and peak memory from the sampled series."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from soak_score import p95


def cpu_us_per_port_s(cpu_s: float, ports: int, wall_s: float) -> float:
    """CPU microseconds one port costs per second of wall time (NaN for an empty window)."""
    if ports <= 0 or wall_s <= 0:
        return math.nan
    return cpu_s * 1e6 / (ports * wall_s)


def stage_cpu(
    start: Mapping[str, float], end: Mapping[str, float], *, framing_cpu_per_tick_s: float, ticks: int
) -> dict[str, float]:
    """CPU seconds per stage over the window from two samples of each process tree's CPU (name →
    seconds). Framing runs inside the collectors (the shard loop frames on the last report), so
    the collection worker's CPU is split: ``framing`` is the replayed cost per tick times the ticks,
    ``collection`` the rest (never below zero: then the replay overestimates and says so as 0)."""
    used = {name: max(0.0, end[name] - start.get(name, 0.0)) for name in end}
    out = {"twin": used.get("twin", 0.0), "detection": used.get("evaluation", 0.0),
           "web": used.get("web", 0.0), "redis": used.get("redis", 0.0),
           "other": used.get("beat", 0.0) + used.get("delivery", 0.0)}
    if "ingest" in used:  # the jobs' event posts, on their own server (demo's "ingest")
        out["ingest"] = used["ingest"]
    framing = max(0.0, framing_cpu_per_tick_s) * max(0, ticks)
    worker = used.get("worker", 0.0)
    out["framing"] = min(framing, worker)
    out["collection"] = worker - out["framing"]
    return out


def pixel_latencies_ms(draws: Sequence[Mapping[str, float]], after_ms: float) -> list[float]:
    """Counter→pixel latency of every column the page drew after ``after_ms`` (page clock, ms
    since the epoch): the draw's wall time minus the frame's timestamp (the instant its counters
    describe), as bench/live.py measures it."""
    return [float(d["at"]) - float(d["ts"]) for d in draws if float(d["at"]) >= after_ms]


def pixel_p95_ms(draws: Sequence[Mapping[str, float]], after_ms: float) -> float:
    return p95(pixel_latencies_ms(draws, after_ms))


def peak_mb(series: Mapping[str, Sequence[tuple[float, float]]]) -> dict[str, float]:
    """The largest sample of each process's memory series (name → [(elapsed s, MB)])."""
    return {name: max((mb for _, mb in s), default=0.0) for name, s in series.items()}
