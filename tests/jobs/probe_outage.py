"""A real gloo job posting through the probe while its server goes away and comes back: the shared
scenario of ``test_probe_outage.py`` (a short outage, in ``make test``) and
``bench/probe_outage.py`` (the issue's 2 minutes).

::

    4 torch ranks (gloo, outage_ranks.py) ──probe posters──▶ python -m fabricmon.serve :PORT
        one step every step_s                                   │ stopped (SIGTERM) for outage_s,
        events spooled while it is down                         │ then started again on :PORT
                                                                ▼
    sent = ids the ranks' probes emitted;  stored = ids the run exports;  lost = sent − stored

The server gets its own SQLite file and the Redis database of ``redis_url``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from asgi_server import LiveServer, manage, server_env, start_daphne

from collectors.probe import IngestClient

ROOT = Path(__file__).resolve().parents[2]
USER, PASSWORD = "outage-owner", "outage-owner-password"


@dataclass
class OutageStack:
    """The server, restartable on its port, and the owner's token."""

    env: dict[str, str]
    tmp: Path
    proc: subprocess.Popen[bytes]
    base: str
    token: str

    @property
    def server(self) -> LiveServer:
        return LiveServer(url=self.base, env=self.env, proc=self.proc)

    def stop(self) -> None:
        self.server.stop()

    def start(self) -> None:
        port = urlsplit(self.base).port or 0
        self.proc, _ = start_daphne(self.env, self.tmp / "daphne.log", port)

    def exported_ids(self, run_id: int) -> list[str]:
        req = urllib.request.Request(f"{self.base}/jobs/api/runs/{run_id}/events")
        req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=60) as resp:
            return [json.loads(line)["event_id"] for line in resp.read().splitlines() if line.strip()]


@contextmanager
def outage_stack(tmp: Path, redis_url: str) -> Iterator[OutageStack]:
    env = server_env(tmp, redis_url)
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "create_demo_user", "--username", USER, "--password", PASSWORD, "--role", "operators")
    token = manage(env, "create_api_token", USER).strip()
    proc, base = start_daphne(env, tmp / "daphne.log")
    stack = OutageStack(env=env, tmp=tmp, proc=proc, base=base, token=token)
    try:
        yield stack
    finally:
        stack.stop()


@dataclass
class OutageResult:
    run_id: int
    sent: int
    stored: int
    lost: int
    duplicates_stored: int  # ids stored more than once (the server dedups: must be 0)
    unknown_stored: int  # ids stored that no rank sent
    outage_s: float  # from the stop to the restarted server's first answer
    posters: list[dict[str, Any]] = field(default_factory=list)

    @property
    def retried_duplicates(self) -> int:
        """Events posted again after a lost answer and recognised by the server."""
        return sum(p["duplicates"] for p in self.posters)

    def bench_line(self) -> str:
        peak = max(p["peak_spool_bytes"] for p in self.posters)
        failed = sum(p["failed_posts"] for p in self.posters)
        return (
            f"BENCH probe_outage outage_s={self.outage_s:.1f} ranks={len(self.posters)} sent={self.sent} "
            f"stored={self.stored} lost={self.lost} duplicates_stored={self.duplicates_stored} "
            f"retried_duplicates={self.retried_duplicates} failed_posts={failed} peak_spool_bytes={peak} "
            f"max_close_s={max(p['close_s'] for p in self.posters)}"
        )


def gloo_job_through_outage(
    stack: OutageStack,
    out: Path,
    *,
    outage_s: float,
    steps: int,
    step_s: float,
    world: int = 4,
    layers: int = 2,
    during: Callable[[], None] | None = None,
) -> OutageResult:
    """Start the job, stop the server once the job's first two steps are stored, keep it down for
    ``outage_s`` (``during`` runs meanwhile), start it again and let the job finish."""
    client = IngestClient(stack.base, stack.token)
    run_id = client.create_run("gloo outage", ["probe-outage"], world_size=world)
    job = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/jobs/outage_ranks.py"), str(out), stack.base, stack.token,
         str(run_id), "--world", str(world), "--layers", str(layers), "--steps", str(steps),
         "--step-s", str(step_s)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while len(stack.exported_ids(run_id)) < world * layers * 4 * 2:
            assert job.poll() is None, job.stdout.read().decode()[-4000:] if job.stdout else ""
            assert time.monotonic() < deadline, "the job stored nothing within 240 s"
            time.sleep(0.5)
        down = time.monotonic()
        stack.stop()
        if during is not None:
            during()
        time.sleep(max(down + outage_s - time.monotonic(), 0))
        stack.start()
        outage = time.monotonic() - down
        output, _ = job.communicate(timeout=steps * step_s + 600)
        assert job.returncode == 0, output.decode()[-4000:]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    sent = [i for r in range(world) for i in json.loads((out / f"ids_rank{r}.json").read_text())]
    stored = stack.exported_ids(run_id)
    return OutageResult(
        run_id=run_id,
        sent=len(sent),
        stored=len(stored),
        lost=len(set(sent) - set(stored)),
        duplicates_stored=len(stored) - len(set(stored)),
        unknown_stored=len(set(stored) - set(sent)),
        outage_s=outage,
        posters=[json.loads((out / f"poster_rank{r}.json").read_text()) for r in range(world)],
    )
