"""A queued upload imported by a real Celery worker: Daphne takes the upload and answers 202 at
once, the worker (a subprocess on the real Redis broker, its own queue) imports the saved file,
and the status URL goes queued → running → done with the counts.

    pytest ──POST upload──▶ daphne ──(file saved, task)──▶ Redis ──▶ celery worker ──▶ SQLite file
    pytest ──GET status URL (polled)──▶ daphne ◀── upload row (state, bytes read, counts) ──┘
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from collectors.probe import IngestClient

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _multipart(fields: dict[str, str], path: Path) -> tuple[bytes, str]:
    boundary = "fabricmonworkerboundary"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{path.name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode()
        + path.read_bytes()
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


@pytest.mark.timeout(180)
def test_a_real_worker_imports_a_queued_upload(tmp_path: Path, redis_url: str, fabric_name: str) -> None:
    spec = importlib.util.spec_from_file_location("bench_ingest", ROOT / "bench" / "ingest.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    trace = tmp_path / "kineto_rank1.json"
    n_a2a = bench.write_trace(trace, 4)
    queue = f"import-{fabric_name}"
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "FABRICMON_VAR_DIR": str(tmp_path),
        "FABRICMON_UPLOAD_DIR": str(tmp_path / "uploads"),
        "FABRICMON_UPLOAD_INLINE_BYTES": "100000",  # the 4 MB trace goes to the worker
        "FABRICMON_IMPORT_QUEUE": queue,
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "fabricmon.settings",
    }
    subprocess.run([PY, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    token = subprocess.run(
        [PY, "manage.py", "create_api_token", "alice", "--create-user"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    port = _free_port()
    server_log = open(tmp_path / "daphne.log", "w")  # noqa: SIM115 - closed in finally
    worker_log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 - closed in finally
    server = subprocess.Popen(
        [PY, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "fabricmon.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=server_log,
        stderr=subprocess.STDOUT,
    )
    worker = subprocess.Popen(
        [
            PY,
            "-m",
            "celery",
            "-A",
            "fabricmon.celery",
            "worker",
            "--pool=solo",
            "-Q",
            queue,
            "-n",
            f"{queue}@%h",
            "--without-gossip",
            "--without-mingle",
            "--loglevel=INFO",
        ],
        cwd=ROOT,
        env=env,
        stdout=worker_log,
        stderr=subprocess.STDOUT,
    )

    def logs() -> str:
        return (tmp_path / "daphne.log").read_text()[-2000:] + (tmp_path / "worker.log").read_text()[-3000:]

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, logs()
                time.sleep(0.2)
        client = IngestClient(f"http://127.0.0.1:{port}", token)
        run_id = client.create_run("uploaded")
        body, ctype = _multipart({"kind": "kineto"}, trace)
        status, queued = client.request("POST", f"/jobs/api/runs/{run_id}/uploads", body, ctype)
        assert status == 202 and queued["state"] == "queued", queued
        states = [queued["state"]]
        deadline = time.monotonic() + 120
        while states[-1] in ("queued", "running"):
            assert worker.poll() is None and time.monotonic() < deadline, logs()
            time.sleep(0.2)
            status, row = client.request("GET", queued["status_url"])
            assert status == 200, row
            if row["state"] != states[-1]:
                states.append(row["state"])
        assert states[-1] == "done", (row, logs())
        assert row["bytes_read"] == row["size_bytes"] == trace.stat().st_size
        assert (row["events_stored"], row["events_rejected"]) == (n_a2a, 0)
        assert list((tmp_path / "uploads").iterdir()) == []
        req = urllib.request.Request(f"http://127.0.0.1:{port}/jobs/api/runs/{run_id}/events?source=kineto")
        req.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(req, timeout=10) as resp:
            exported = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
        assert len(exported) == n_a2a and all(e["collective"] for e in exported)
        assert "jobs.import_upload" in (tmp_path / "worker.log").read_text()
    finally:
        worker.send_signal(signal.SIGTERM)
        server.terminate()
        for proc in (worker, server):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        server_log.close()
        worker_log.close()
