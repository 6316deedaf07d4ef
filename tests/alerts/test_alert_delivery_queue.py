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
deadline and not one evaluation would finish while the drips are open (checked by hand with
FABRICMON_DELIVERY_QUEUE=celery: the test then fails waiting for the evaluations).
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from delivery_stack import DeliveryStack, StackError
from raw_receiver import RawReceiver, drip

pytestmark = pytest.mark.integration
DEADLINE_S = 20  # each drip delivery holds its process this long
WANTED = 6  # evaluations (every 0.5 s) and collector jobs (every 1 s) that must finish meanwhile


def test_a_drip_receiver_does_not_slow_evaluation_or_collection(tmp_path: Path, redis_url: str) -> None:
    stop = threading.Event()
    drips = [RawReceiver(drip(b"HTTP/1.1 200 OK\r\n" * 10, every_s=5.0, stop=stop)) for _ in range(3)]
    stack = DeliveryStack(
        tmp_path,
        redis_url,
        {
            "FABRICMON_ALERTS_ALLOW_HOSTS": "127.0.0.1",
            "FABRICMON_ALERTS_DELIVERY_DEADLINE_S": str(DEADLINE_S),
            "FABRICMON_ALERTS_EVALUATE_S": "0.5",
            "FABRICMON_ALERTS_DELIVER_S": "1",
            "FABRICMON_ENSURE_COLLECTORS_S": "1",
        },
    )
    try:
        stack.prepare([d.url for d in drips])
        # the demo's two workers (fabricmon/demo.py SERVICE_COMMANDS), the main one cut to 1 process
        stack.start("worker", "worker", "--concurrency", "1")
        stack.start("delivery", "worker", "-Q", "delivery", "--concurrency", "2")
        stack.start("beat", "beat", "--schedule", str(tmp_path / "beat-schedule"))

        # both delivery processes are inside a drip
        stack.wait_for("two drip deliveries", lambda: sum(len(d.exchanges) for d in drips) >= 2, 60)
        t0 = time.monotonic()
        e0 = stack.succeeded("worker", "alerts.evaluate")
        c0 = stack.succeeded("worker", "telemetry.ensure_collectors")
        stack.wait_for(
            f"{WANTED} evaluations and collector jobs during the drips",
            lambda: (
                stack.succeeded("worker", "alerts.evaluate") - e0 >= WANTED
                and stack.succeeded("worker", "telemetry.ensure_collectors") - c0 >= WANTED
            ),
            DEADLINE_S,
        )
        during = time.monotonic() - t0
        # … and they all finished while both drip deliveries were still being held open
        assert "Task alerts.deliver_due[" not in stack.log("worker").read_text()  # never on the main worker
        assert not re.search(
            r"Task alerts\.deliver_due\[[^\]]+\] succeeded", stack.log("delivery").read_text()
        )
        held = [d for d in drips if d.exchanges]
        assert len(held) == 2 and all(len(d.exchanges) == 1 for d in held)  # each sent once, not re-handed
        assert all(d.exchanges[0].closed_at is None for d in held)
        print(
            f"during two held deliveries: {stack.succeeded('worker', 'alerts.evaluate') - e0} evaluations, "
            f"{stack.succeeded('worker', 'telemetry.ensure_collectors') - c0} collector jobs in {during:.1f} s"
        )
    except StackError as exc:
        pytest.fail(str(exc))
    finally:
        stop.set()
        stack.stop()
        for d in drips:
            d.stop()
