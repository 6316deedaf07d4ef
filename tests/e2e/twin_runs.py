"""Server-side setup shared by the phase-page browser tests: the twin's recorded job as runs of
the e2e user on the Daphne server's own database, and its 1 s counter frames in Redis."""

from __future__ import annotations

import ast

from collectors.probe import IngestClient
from fabricmon.telemetry import live_window
from twin.config import TwinConfig
from twin.job_reporter import TwinJobRecording

T0_NS = 1_800_000_000_000_000_000
USER = "op-e2e"  # the e2e session user (tests/e2e/conftest.py)


def twin_job_runs(daphne_server, redis_client, fabric_name: str, names: tuple[str, ...],  # type: ignore[no-untyped-def]
                  duration_s: float = 40.0) -> tuple[TwinJobRecording, list[int], IngestClient]:
    """Import the twin's fabric, create one run per name, and return the recording, the run ids
    and an ingest client holding a fresh token of the e2e user."""
    rec = TwinJobRecording(TwinConfig(name=fabric_name, servers=4, gpus_per_server=4, spines=2), duration_s, T0_NS)
    out = daphne_server.manage(
        "shell",
        "-c",
        "\n".join(
            [
                "from django.contrib.auth import get_user_model",
                "from fabricmon.core.topology.railgen import rail_optimized",
                "from fabricmon.jobs.runs import create_run",
                "from fabricmon.jobs.tokens import issue_token",
                "from fabricmon.topology.services import import_fabric",
                f"import_fabric(rail_optimized({fabric_name!r}, servers=4, gpus_per_server=4, spines=2, speed_gbps=400))",
                f"u = get_user_model().objects.get(username={USER!r})",
                f"runs = [create_run(u, n, fabric={fabric_name!r}, world_size={rec.world_size}).pk for n in {names!r}]",
                "print(repr((runs, issue_token(u)[1])))",
            ]
        ),
    )
    runs, token = ast.literal_eval(out.strip().splitlines()[-1])
    for frame in rec.counter_frames(1.0):
        live_window.append(redis_client, frame, max_frames=10_000)
    return rec, runs, IngestClient(daphne_server.url, token)
