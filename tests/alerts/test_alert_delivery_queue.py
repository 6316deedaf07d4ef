"""A receiver that drips one byte every 5 s holds only the delivery worker: alert evaluation and
the collectors' beat job keep running on the main worker meanwhile — counted through real Celery
processes (the demo's two workers and beat, with the product's routes and beat schedule) on a
real Redis broker.

    beat ──alerts.evaluate, telemetry.ensure_collectors──▶ queue "celery"   ──▶ worker (1 process)
         └─alerts.deliver_due (CELERY_TASK_ROUTES) ──────▶ queue "delivery" ──▶ delivery worker
                                                                                 (2 processes)
                                                                                     │ TCP
                                               drip receivers (1 byte / 5 s) ◀───────┘

If deliveries ran on the main worker, its one process would sit in a drip for the whole delivery
deadline and not one evaluation would finish while the drips are open.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import redis
from raw_receiver import RawReceiver, drip

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 20  # each drip delivery holds its process this long
WANTED = 6  # evaluations (every 0.5 s) and collector jobs (every 1 s) that must finish meanwhile

MAKE_ROWS = """
import dataclasses
from django.utils import timezone
from fabricmon.alerts.models import Outbox, Receiver
from fabricmon.alerts.transports import Message
now = timezone.now()
for n, url in enumerate({urls!r}):
    rcv = Receiver.objects.create(name=f"drip{{n}}", kind="webhook", url=url)
    msg = Message(id=f"msg_{{n}}", fingerprint="f", fabric="su1", kind="incast", key="p", status="firing",
                  summary="s", starts_at=now.isoformat())
    Outbox.objects.create(receiver=rcv, payload=dataclasses.asdict(msg), created_at=now, next_attempt_at=now)
print("ROWS", Outbox.objects.count())
"""


def succeeded(log: Path, task: str) -> int:
    return len(re.findall(rf"Task {re.escape(task)}\[[^\]]+\] succeeded", log.read_text()))


def celery(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "fabricmon.celery", *args, "--loglevel", "INFO"],
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )


def wait_for(what: str, check, procs: dict[str, subprocess.Popen[bytes]], logs: Path, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while not check():
        dead = [n for n, p in procs.items() if p.poll() is not None]
        if dead or time.monotonic() > end:
            tails = "\n".join(f"--- {f.name}\n{f.read_text()[-2500:]}" for f in sorted(logs.glob("*.log")))
            pytest.fail(f"{what}: {'exited: ' + ','.join(dead) if dead else 'timed out'}\n{tails}")
        time.sleep(0.1)


def test_a_drip_receiver_does_not_slow_evaluation_or_collection(tmp_path: Path, redis_url: str) -> None:
    stop = threading.Event()
    drips = [RawReceiver(drip(b"HTTP/1.1 200 OK\r\n" * 10, every_s=5.0, stop=stop)) for _ in range(3)]
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests' / 'alerts'}",
        "DJANGO_SETTINGS_MODULE": "queue_settings",
        "FABRICMON_TEST_KEYPREFIX": prefix,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "FABRICMON_VAR_DIR": str(tmp_path),
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "FABRICMON_ALERTS_ALLOW_HOSTS": "127.0.0.1",
        "FABRICMON_ALERTS_DELIVERY_DEADLINE_S": str(DEADLINE_S),
        "FABRICMON_ALERTS_EVALUATE_S": "0.5",
        "FABRICMON_ALERTS_DELIVER_S": "1",
        "FABRICMON_ENSURE_COLLECTORS_S": "1",
    }
    for step in (["migrate", "--noinput", "-v", "0"], ["shell", "-c", MAKE_ROWS.format(urls=[d.url for d in drips])]):
        done = subprocess.run([sys.executable, "manage.py", *step], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    logs = tmp_path
    main_log, delivery_log = logs / "worker.log", logs / "delivery.log"
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        # the demo's two workers (fabricmon/demo.py SERVICE_COMMANDS), the main one cut to 1 process
        procs["worker"] = celery(env, main_log, "worker", "--concurrency", "1", "-n", f"main-{prefix}@%h",
                                 "--without-gossip", "--without-mingle")
        procs["delivery"] = celery(env, delivery_log, "worker", "-Q", "delivery", "--concurrency", "2",
                                   "-n", f"delivery-{prefix}@%h", "--without-gossip", "--without-mingle")
        for name, log in (("worker", main_log), ("delivery", delivery_log)):
            wait_for(f"{name} ready", lambda log=log: "ready." in log.read_text(), procs, logs, 90)
        procs["beat"] = celery(env, logs / "beat.log", "beat", "--schedule", str(tmp_path / "beat-schedule"))

        # both delivery processes are inside a drip
        wait_for("two drip deliveries", lambda: sum(len(d.exchanges) for d in drips) >= 2, procs, logs, 60)
        t0 = time.monotonic()
        e0, c0 = succeeded(main_log, "alerts.evaluate"), succeeded(main_log, "telemetry.ensure_collectors")
        wait_for(
            f"{WANTED} evaluations and collector jobs during the drips",
            lambda: succeeded(main_log, "alerts.evaluate") - e0 >= WANTED
            and succeeded(main_log, "telemetry.ensure_collectors") - c0 >= WANTED,
            procs, logs, DEADLINE_S,
        )
        during = time.monotonic() - t0
        # … and they all finished while both drip deliveries were still being held open
        assert "Task alerts.deliver_due[" not in main_log.read_text()  # never on the main worker
        assert not re.search(r"Task alerts\.deliver_due\[[^\]]+\] succeeded", delivery_log.read_text())
        held = [d for d in drips if d.exchanges]
        assert len(held) == 2 and all(len(d.exchanges) == 1 for d in held)  # each sent once, not re-handed
        assert all(not d.exchanges[0].client_gone for d in held)
        print(f"during two held deliveries: {succeeded(main_log, 'alerts.evaluate') - e0} evaluations, "
              f"{succeeded(main_log, 'telemetry.ensure_collectors') - c0} collector jobs in {during:.1f} s")
    finally:
        stop.set()
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # our own process groups: worker + its pool
                proc.wait(10)
        for d in drips:
            d.stop()
        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()
