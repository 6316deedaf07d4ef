"""A reported twin run for the phases app tests: the twin's job posted through the probe's client
path, and its switch counters put in the fabric's live window as 1 s frames (what the collectors
would have written for that time), so every gate has data to judge."""

from __future__ import annotations

from typing import Any

from collectors.probe import IngestClient
from fabricmon.jobs import runs
from fabricmon.jobs.tokens import issue_token
from fabricmon.telemetry import live_window
from fabricmon.topology.services import import_fabric
from twin.config import TwinConfig
from twin.job_reporter import TwinJobRecording

T0_NS = 1_800_000_000_000_000_000


def recording(fabric: str, seconds: float = 40.0) -> TwinJobRecording:
    """4 servers x 4 GPUs, 2 spines; ``seconds`` of the twin's MoE job (≈ 110 steps in 40 s: ≥ 2 polls per (layer, phase), so attribution is gated in)."""
    rec = TwinJobRecording(TwinConfig(name=fabric, servers=4, gpus_per_server=4, spines=2), seconds, T0_NS)
    import_fabric(rec.fabric)
    return rec


def write_counters(r: Any, rec: TwinJobRecording, poll_s: float = 1.0) -> int:
    """The twin's true per-port bytes per ``poll_s`` interval as frames in the live window."""
    frames = rec.counter_frames(poll_s)
    for frame in frames:
        live_window.append(r, frame, max_frames=10_000)
    return len(frames)


def report(live_server: Any, user: Any, rec: TwinJobRecording, **kw: Any) -> Any:
    """Create a run and post the twin's rank map and events to the live server's ingest API."""
    run = runs.create_run(user, "twin-moe", fabric=rec.fabric.name, world_size=rec.world_size)
    _, token = issue_token(user)
    stats = rec.report(IngestClient(live_server.url, token), run.pk, **kw)
    assert stats["dropped"] == 0 and stats["rejected"] == 0 and stats["posted"] > 0, stats
    return run
