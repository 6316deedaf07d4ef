"""A reported twin run for the reports tests (as tests/phases/phase_twin.py): the twin's MoE job
(4 servers × 4 GPUs, 2 spines, 8 layers of dispatch and combine) posted through the probe's client
path to the live server, its counters in the fabric's live window as 1 s frames."""

from __future__ import annotations

from typing import Any

from collectors.probe import IngestClient
from fabricmon.jobs import runs
from fabricmon.jobs.tokens import issue_token
from tests.whatif.whatif_twin import recording, write_counters
from twin.job_reporter import TwinJobRecording

__all__ = ["recording", "report", "write_counters"]  # the same twin run as the what-if tests


def report(live_server: Any, user: Any, rec: TwinJobRecording, name: str = "twin-moe",
           tags: tuple[str, ...] = (), **kw: Any) -> Any:
    run = runs.create_run(user, name, list(tags), fabric=rec.fabric.name, world_size=rec.world_size)
    _, token = issue_token(user)
    stats = rec.report(IngestClient(live_server.url, token), run.pk, **kw)
    assert stats["dropped"] == 0 and stats["rejected"] == 0 and stats["posted"] > 0, stats
    return run
