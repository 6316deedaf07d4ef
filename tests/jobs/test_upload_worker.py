"""A queued upload imported by a real Celery worker: Daphne takes the upload and answers 202 at
once, the worker (a subprocess on the real Redis broker, its own queue) imports the saved file,
and the status URL goes queued → (running) → done with the counts.

    pytest ──POST upload──▶ daphne ──(file saved, task)──▶ Redis ──▶ celery worker ──▶ SQLite file
    pytest ──GET status URL (polled)──▶ daphne ◀── upload row (state, bytes read, counts) ──┘
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path

import pytest
from upload_stack import upload_stack, write_kineto_trace

from collectors.probe import IngestClient

pytestmark = pytest.mark.integration


@pytest.mark.timeout(180)
def test_a_real_worker_imports_a_queued_upload(tmp_path: Path, redis_url: str, fabric_name: str) -> None:
    trace = tmp_path / "kineto_rank1.json"
    n_a2a = write_kineto_trace(trace, 4)
    # the 4 MB trace is above the inline limit: it goes to the worker
    with upload_stack(tmp_path, redis_url, f"import-{fabric_name}", inline_bytes=100_000) as stack:
        token = stack.manage("create_api_token", "alice", "--create-user")
        client = IngestClient(stack.url, token)
        run_id = client.create_run("uploaded")
        status, queued = client.upload_trace(run_id, "kineto", trace)
        assert status == 202 and queued["state"] == "queued", queued
        states = [queued["state"]]
        deadline = time.monotonic() + 120
        while states[-1] in ("queued", "running"):
            assert time.monotonic() < deadline, stack.log_tail()
            time.sleep(0.2)
            status, row = client.request("GET", queued["status_url"])
            assert status == 200, row
            if row["state"] != states[-1]:
                states.append(row["state"])
        assert states[-1] == "done", (row, stack.log_tail())
        assert row["bytes_read"] == row["size_bytes"] == trace.stat().st_size
        assert (row["events_stored"], row["events_rejected"]) == (n_a2a, 0)
        assert list((tmp_path / "uploads").iterdir()) == []
        req = urllib.request.Request(f"{stack.url}/jobs/api/runs/{run_id}/events?source=kineto")
        req.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(req, timeout=10) as resp:
            exported = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
        assert len(exported) == n_a2a and all(e["collective"] for e in exported)
        assert "jobs.import_upload" in (tmp_path / "logs" / "worker.log").read_text()


@pytest.mark.timeout(120)
def test_an_unreachable_import_queue_is_a_503_that_leaves_nothing_behind(
    tmp_path: Path, redis_url: str
) -> None:
    """The broker is a closed port: the queued upload is answered 503 with the reason at once (not
    a 202 whose import never starts, nor a 500), the upload row says failed, and no file stays."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # bound, never listening: connections are refused
        trace = tmp_path / "kineto_rank1.json"
        write_kineto_trace(trace, 1)
        with upload_stack(
            tmp_path, redis_url, "import-nowhere", 100_000, f"redis://127.0.0.1:{closed}/0"
        ) as stack:
            token = stack.manage("create_api_token", "bob", "--create-user")
            client = IngestClient(stack.url, token, timeout_s=60)
            run_id = client.create_run("no-queue")
            status, body = client.upload_trace(run_id, "kineto", trace, mode="queue")
            assert status == 503, body
            assert "import queue is unreachable" in body["error"] and body["field"] == "file", body
            status, rows = client.request("GET", f"/jobs/api/runs/{run_id}/uploads")
            assert status == 200, rows
            (row,) = rows["uploads"] if isinstance(rows, dict) else rows
            assert row["state"] == "failed" and "unreachable" in row["error"], row
            assert list((tmp_path / "uploads").iterdir()) == []
