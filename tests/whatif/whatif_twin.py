"""A reported twin run for the What-if tests: the twin's seeded MoE job (4 servers x 4 GPUs, 2
spines, top-8 of 16 experts, FP8 dispatch rows of 7,168 bytes) posted through the probe's client
path to the live server, counters in the fabric's live window as 1 s frames."""

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
DISPATCH_ROW_BYTES = 7168  # hidden 7168 x FP8


def recording(fabric: str, seconds: float = 12.0) -> TwinJobRecording:
    rec = TwinJobRecording(TwinConfig(name=fabric, servers=4, gpus_per_server=4, spines=2), seconds, T0_NS)
    import_fabric(rec.fabric)
    return rec


def write_counters(r: Any, rec: TwinJobRecording) -> None:
    for frame in rec.counter_frames(1.0):
        live_window.append(r, frame, max_frames=10_000)


def report(live_server: Any, user: Any, rec: TwinJobRecording, name: str = "twin-moe",
           events: list[dict[str, Any]] | None = None, **kw: Any) -> Any:
    """Create a run and post the twin's rank map and events (or ``events``) to the ingest API."""
    run = runs.create_run(user, name, fabric=rec.fabric.name, world_size=rec.world_size)
    _, token = issue_token(user)
    client = IngestClient(live_server.url, token)
    if events is None:
        stats = rec.report(client, run.pk, **kw)
        assert stats["dropped"] == 0 and stats["rejected"] == 0 and stats["posted"] > 0, stats
    else:
        from collectors.probe import EventPoster

        status, body = client.post_rank_map(run.pk, rec.rank_map())
        assert status < 300, body
        poster = EventPoster(client, run.pk, batch_size=2_000, max_buffer=1 << 22)
        for ev in events:
            poster.submit(ev)
        stats = poster.close(timeout_s=120)
        assert stats.rejected == 0 and stats.dropped == 0, stats
    return run
