"""A reported twin run for the phases app tests: the twin's job posted through the probe's client
path, and its switch counters put in the fabric's live window as 1 s frames (what the collectors
would have written for that time), so every gate has data to judge."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from collectors.probe import IngestClient
from fabricmon.core.frames import Frame
from fabricmon.jobs import services as jobs
from fabricmon.jobs.tokens import issue_token
from fabricmon.telemetry import live_window
from fabricmon.topology.services import import_fabric
from twin.job_reporter import TwinJobRecording
from twin.runtime import TwinConfig

T0_NS = 1_800_000_000_000_000_000


def recording(fabric: str, seconds: float = 40.0) -> TwinJobRecording:
    """4 servers x 4 GPUs, 2 spines; ``seconds`` of the twin's MoE job (≈ 110 steps in 40 s: ≥ 2 polls per (layer, phase), so attribution is gated in)."""
    rec = TwinJobRecording(TwinConfig(name=fabric, servers=4, gpus_per_server=4, spines=2), seconds, T0_NS)
    import_fabric(rec.fabric)
    return rec


def write_counters(r: Any, rec: TwinJobRecording, poll_s: float = 1.0) -> int:
    """The twin's true per-port bytes per ``poll_s`` interval as frames in the live window."""
    n = int((rec.end_ns - rec.t0_ns) / (poll_s * 1e9))
    edges = rec.t0_ns + (np.arange(n + 1) * poll_s * 1e9).astype(np.int64)
    version = rec.ports.version
    for a, b in itertools.pairwise(edges):
        in_b, out_b = rec.window_bytes(int(a), int(b))
        metrics = {
            "in_bps": (in_b * 8 / poll_s).astype(np.float32),
            "out_bps": (out_b * 8 / poll_s).astype(np.float32),
        }
        live_window.append(r, Frame(rec.fabric.name, version, int(b), poll_s, metrics), max_frames=10_000)
    return n


def report(live_server: Any, user: Any, rec: TwinJobRecording, **kw: Any) -> Any:
    """Create a run and post the twin's rank map and events to the live server's ingest API."""
    run = jobs.create_run(user, "twin-moe", fabric=rec.fabric.name, world_size=rec.world_size)
    _, token = issue_token(user)
    stats = rec.report(IngestClient(live_server.url, token), run.pk, **kw)
    assert stats["dropped"] == 0 and stats["rejected"] == 0 and stats["posted"] > 0, stats
    return run
