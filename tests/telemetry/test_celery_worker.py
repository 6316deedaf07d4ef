"""A real Celery worker (prefork, 2 processes) collects the twin: beat's job enqueues the shards,
the worker's collect_shard tasks hold the leases and frames appear in the live window.

    test ──send_task(ensure_collectors)──▶ Redis broker ──▶ celery worker (subprocess, file SQLite)
                                                              ├─ ensure_collectors → collect_shard x 2
                                                              └─ run_shard ◀─UDP─ twin process
    test ◀──────────── live window frames, health ──────────── Redis

pytest-django's test database is invisible to a subprocess, so the worker gets its own SQLite
file (DATABASE_URL), migrated and loaded with the twin's topology by manage.py, as an operator would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from telemetry_harness import REPO

from fabricmon.celery import app
from fabricmon.telemetry import live_window

pytestmark = pytest.mark.integration


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_celery_worker_collects_a_twin_fabric(twin_process, fabric_name, redis_url, redis_client, tmp_path) -> None:
    queue = f"collect-{fabric_name}"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "DJANGO_SETTINGS_MODULE": "fabricmon.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'worker.sqlite3'}",
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "FABRICMON_COLLECTOR_QUEUE": queue,
        "FABRICMON_SHARD_SIZE": "3",  # 6 switches → 2 shards, one per worker process
        "FABRICMON_LEASE_S": "3",  # short leases: a quick warm shutdown
    }
    _manage(env, "migrate", "--no-input", "-v", "0")
    assert "loaded fabric" in _manage(env, "load_topology", str(twin_process.topology_path))
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 - closed in finally
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "fabricmon.celery", "worker", "--pool=prefork",
         "--concurrency=2", "-Q", queue, "-n", f"{queue}@%h", "--without-gossip", "--without-mingle",
         "--loglevel=INFO"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        # What beat does every few seconds (CELERY_BEAT_SCHEDULE "ensure-collectors").
        app.send_task("telemetry.ensure_collectors", queue=queue)

        def frames_with_all_switches() -> int:
            frames = [f for _, f in live_window.read_window(redis_client, fabric_name)]
            return sum(bool(np.isfinite(f.metrics["in_bps"]).all()) for f in frames)

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and frames_with_all_switches() < 3:
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()
            time.sleep(0.25)
        assert frames_with_all_switches() >= 3, (tmp_path / "worker.log").read_text()[-3000:]
        health = live_window.read_health(redis_client, fabric_name)
        assert len(health) == 6 and all(h["up"] for h in health.values())
        assert {h["shard"] for h in health.values()} == {f"{fabric_name}:0", f"{fabric_name}:1"}
    finally:
        worker.send_signal(signal.SIGTERM)  # warm shutdown: the running leases end and are handed back
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        log.close()
        redis_client.delete(queue)  # a lease that ended re-queued itself; nobody will consume it now
    # the warm shutdown ended every collector task: no pool child killed mid-task
    text = (tmp_path / "worker.log").read_text()
    assert worker.returncode == 0 and "WorkerLostError" not in text and "exited with 'signal" not in text, text[-3000:]
