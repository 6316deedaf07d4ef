"""Real Celery processes for delivery tests and bench/delivery.py: a migrated SQLite file, outbox
rows for given receiver URLs, workers and beat started with the product's settings — its routes,
queues and beat schedule — but every Celery key in Redis under a prefix of their own
(``queue_settings``), so they share no queue with anything else on the same Redis."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[2]

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


class StackError(AssertionError):
    pass


@dataclass
class DeliveryStack:
    workdir: Path
    redis_url: str
    settings: dict[str, str] = field(default_factory=dict)
    prefix: str = field(default_factory=lambda: f"test-{uuid.uuid4().hex[:8]}:")
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests' / 'alerts'}",
            "DJANGO_SETTINGS_MODULE": "queue_settings",
            "FABRICMON_TEST_KEYPREFIX": self.prefix,
            "DATABASE_URL": f"sqlite:///{self.workdir / 'db.sqlite3'}",
            "FABRICMON_VAR_DIR": str(self.workdir),
            "REDIS_URL": self.redis_url,
            "CELERY_BROKER_URL": self.redis_url,
            **self.settings,
        }

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode:
            raise StackError(f"manage.py {args[0]}: {done.stdout}{done.stderr}")
        return done.stdout

    def prepare(self, receiver_urls: list[str]) -> None:
        self.manage("migrate", "--noinput", "-v", "0")
        self.manage("shell", "-c", MAKE_ROWS.format(urls=receiver_urls))

    def start(self, name: str, *args: str) -> None:
        """``celery -A fabricmon.celery <args>`` in its own process group, logging to ``name.log``."""
        if args[0] == "worker":
            args = (*args, "-n", f"{name}-{self.prefix}@%h", "--without-gossip", "--without-mingle")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "fabricmon.celery", *args, "--loglevel", "INFO"],
            cwd=ROOT,
            env=self.env,
            stdout=self.log(name).open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if args[0] == "worker":
            self.wait_for(f"{name} ready", lambda: "ready." in self.log(name).read_text(), 90)

    def succeeded(self, worker: str, task: str) -> int:
        """How many ``task`` runs the worker's log reports as finished."""
        return len(re.findall(rf"Task {re.escape(task)}\[[^\]]+\] succeeded", self.log(worker).read_text()))

    def wait_for(self, what: str, check: Callable[[], bool], timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while not check():
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead or time.monotonic() > end:
                tails = "\n".join(
                    f"--- {f.name}\n{f.read_text()[-2500:]}" for f in sorted(self.workdir.glob("*.log"))
                )
                raise StackError(f"{what}: {'exited: ' + ','.join(dead) if dead else 'timed out'}\n{tails}")
            time.sleep(0.1)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # our own process groups: a worker and its pool
                proc.wait(10)
        self.procs.clear()
        client = redis.Redis.from_url(self.redis_url)
        for key in client.scan_iter(match=f"{self.prefix}*"):
            client.delete(key)
        client.close()
