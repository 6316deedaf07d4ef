"""Daphne + a real Celery worker on one SQLite file, for queued-upload tests (API and browser).

client ──HTTP──▶ daphne ──(file saved, task on Redis)──▶ celery worker (own queue) ──▶ SQLite
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from asgi_server import manage, start_daphne

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


@dataclass
class UploadStack:
    url: str
    env: dict[str, str]
    logs: Path

    def manage(self, *args: str) -> str:
        return manage(self.env, *args).strip()

    def log_tail(self) -> str:
        return "".join(p.read_text()[-2500:] for p in sorted(self.logs.glob("*.log")))


def write_kineto_trace(path: Path, mb: int) -> int:
    """The bench's gloo-style Kineto trace generator; returns the number of all-to-alls."""
    spec = importlib.util.spec_from_file_location("bench_ingest", ROOT / "bench" / "ingest.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench.write_trace(path, mb)


@contextmanager
def upload_stack(
    tmp_path: Path, redis_url: str, queue: str, inline_bytes: int, broker_url: str | None = None
) -> Iterator[UploadStack]:
    """``broker_url``: the Celery broker of both processes (default: the test Redis)."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "FABRICMON_VAR_DIR": str(tmp_path),
        "FABRICMON_UPLOAD_DIR": str(tmp_path / "uploads"),
        "FABRICMON_UPLOAD_INLINE_BYTES": str(inline_bytes),
        "FABRICMON_IMPORT_QUEUE": queue,
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": broker_url or redis_url,
        "DJANGO_SETTINGS_MODULE": "fabricmon.settings",
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    stack = UploadStack("", env, logs)
    stack.manage("migrate", "--noinput", "-v", "0")
    procs = []
    files = [open(logs / "worker.log", "w")]  # noqa: SIM115 - closed below
    try:
        proc, stack.url = start_daphne(env, logs / "daphne.log")
        procs.append(proc)
        procs.append(
            subprocess.Popen(
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
                stdout=files[0],
                stderr=subprocess.STDOUT,
            )
        )
        yield stack
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        for f in files:
            f.close()
