"""The ingest server at a lower CPU priority (``python -m fabricmon.serve --nice N``): the jobs'
event posts go to a second server of the same application (``fabricmon.demo``'s ``ingest``,
compose's ``ingest``), so a large job's burst of events takes the CPU the collectors leave instead
of theirs. Through the real server: a batch is stored as on the pages' server, and every thread of
the serving process — the reactor, and the thread pool that checked the token and ran the view —
runs at the lower priority (nice is per thread on Linux: a value set after the threads started
would leave them at the old one)."""

from __future__ import annotations

import ast
import json
import os
import urllib.request
from pathlib import Path

import pytest
from asgi_server import live_server

from fabricmon.serve import take_nice

pytestmark = pytest.mark.integration

SETUP = """
from django.contrib.auth import get_user_model
from fabricmon.jobs.runs import create_run
from fabricmon.jobs.tokens import issue_token
user = get_user_model().objects.create_user("niced")
print(repr((create_run(user, "niced", world_size=8).pk, issue_token(user, "n")[1])))
"""
T0 = 1_795_987_668_367_402_543


def _thread_nices(pid: int) -> dict[int, int]:
    """tid → nice of every thread of ``pid`` (/proc/<pid>/task/<tid>/stat, field 19)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        out[int(task.name)] = int(fields[16])  # (fields after the name start at field 3)
    return out


def test_take_nice_leaves_daphnes_arguments_and_refuses_a_higher_priority() -> None:
    assert take_nice(["--nice", "10", "-b", "0.0.0.0", "-p", "8001", "app"]) == (10, ["-b", "0.0.0.0", "-p", "8001", "app"])
    assert take_nice(["--fd", "3", "app"]) == (0, ["--fd", "3", "app"])
    with pytest.raises(SystemExit, match="0-19"):
        take_nice(["--nice", "-5", "app"])


def test_an_ingest_server_at_nice_10_stores_a_batch_with_every_thread_at_that_priority(
    redis_url: str, tmp_path: Path,
) -> None:
    srv = live_server(tmp_path, redis_url, serve_args=("--nice", "10"))
    try:
        run, token = ast.literal_eval(srv.manage("shell", "-c", SETUP).strip().splitlines()[-1])
        lines = [json.dumps({"id": f"n{r}", "rank": r, "step": 1, "layer": 0, "phase": "dispatch",
                             "start_ns": T0, "end_ns": T0 + 10_000, "pg_ranks": list(range(8)),
                             "send_bytes_per_pg_rank": [1000 * (r + d) for d in range(8)]})
                 for r in range(8)]
        req = urllib.request.Request(
            f"{srv.url}/jobs/api/runs/{run}/events", data="\n".join(lines).encode(), method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer = json.loads(resp.read())
        assert answer["stored"] == 8 and answer["rejected_count"] == 0, answer

        nices = _thread_nices(srv.proc.pid)
        want = min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10)
        # the reactor and Twisted's pool (it checked the token) at least: a server that set its
        # priority after they started would show them at the old value here
        assert len(nices) >= 2, nices
        assert set(nices.values()) == {want}, nices
    finally:
        srv.stop()
