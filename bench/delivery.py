"""Delivery isolation benchmark: how many alert evaluations and collector jobs (beat's
``alerts.evaluate`` every 1 s and ``telemetry.ensure_collectors`` every 3 s, the product's
defaults) finish per minute while receivers drip one byte every 5 s — through real Celery
processes and beat on a real Redis — in three arrangements:

    idle       no receivers: the beat's own rate (60 and 20 a minute)
    ours       drip receivers; deliveries on the `delivery` queue, their own worker (make demo)
    shared     the same receivers; deliveries on the main worker's queue, as before issue 13
               (the reference: issue 13 measured 60 → 4 evaluations and 20 → 2 collector jobs a minute)

It also prints how long the receivers were held per delivery (the deadline, 10 s by default,
bounds it) and how many requests each notification took while it was in flight.

    .venv/bin/python bench/delivery.py [--seconds 60] [--receivers 20]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "alerts"))

from delivery_stack import DeliveryStack
from raw_receiver import RawReceiver, drip

MAIN_CONCURRENCY, DELIVERY_CONCURRENCY = 6, 2  # fabricmon/demo.py


def arrangement(name: str, seconds: float, receivers: int, redis_url: str) -> dict[str, float]:
    stop = threading.Event()
    drips = [
        RawReceiver(drip(b"HTTP/1.1 200 OK\r\n" * 100, every_s=5.0, stop=stop)) for _ in range(receivers)
    ]
    settings = {"FABRICMON_ALERTS_ALLOW_HOSTS": "127.0.0.1"}
    if name == "shared":
        settings["FABRICMON_DELIVERY_QUEUE"] = "celery"
    stack = DeliveryStack(Path(tempfile.mkdtemp(prefix=f"bench-delivery-{name}-")), redis_url, settings)
    try:
        stack.prepare([d.url for d in drips] if name != "idle" else [])
        if name == "shared":  # one pool for everything, as many processes as the demo's two workers
            stack.start("worker", "worker", "--concurrency", str(MAIN_CONCURRENCY + DELIVERY_CONCURRENCY))
        else:
            stack.start("worker", "worker", "--concurrency", str(MAIN_CONCURRENCY))
            stack.start("delivery", "worker", "-Q", "delivery", "--concurrency", str(DELIVERY_CONCURRENCY))
        stack.start("beat", "beat", "--schedule", str(stack.workdir / "beat-schedule"))
        if name != "idle":
            stack.wait_for("deliveries under way", lambda: any(d.exchanges for d in drips), 60)
        time.sleep(15)  # let the pools fill up: the steady state is what is measured
        e0, c0 = (
            stack.succeeded("worker", "alerts.evaluate"),
            stack.succeeded("worker", "telemetry.ensure_collectors"),
        )
        t0 = time.monotonic()
        time.sleep(seconds)
        minutes = (time.monotonic() - t0) / 60
        evaluations = (stack.succeeded("worker", "alerts.evaluate") - e0) / minutes
        collectors = (stack.succeeded("worker", "telemetry.ensure_collectors") - c0) / minutes
    finally:
        stop.set()
        stack.stop()
        for d in drips:
            d.stop()
    held = [x.held_s for d in drips for x in d.exchanges if x.held_s is not None]
    # a request to a receiver while its previous one was still open: a row handed out in flight
    overlap = 0
    for d in drips:
        spans = sorted((x.opened_at, x.closed_at or float("inf")) for x in d.exchanges)
        overlap += sum(b[0] < a[1] for a, b in itertools.pairwise(spans))
    return {
        "evaluations_per_min": evaluations,
        "collector_jobs_per_min": collectors,
        "held_max_s": max(held, default=0.0),
        "deliveries": float(sum(len(d.exchanges) for d in drips)),
        "overlaps": float(overlap),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window per arrangement")
    parser.add_argument("--receivers", type=int, default=20, help="drip receivers, one notification each")
    args = parser.parse_args()
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    results = {}
    for name in ("idle", "ours", "shared"):
        results[name] = r = arrangement(name, args.seconds, args.receivers, redis_url)
        print(
            f"{name:>6}: {r['evaluations_per_min']:5.1f} evaluations/min, {r['collector_jobs_per_min']:5.1f} "
            f"collector jobs/min, {r['deliveries']:.0f} deliveries, longest held {r['held_max_s']:.1f} s, "
            f"requests while one was in flight: {r['overlaps']:.0f}",
            flush=True,
        )
    idle, ours, shared = results["idle"], results["ours"], results["shared"]
    print(
        f"BENCH delivery evaluations_per_min={ours['evaluations_per_min']:.1f} "
        f"idle_evaluations_per_min={idle['evaluations_per_min']:.1f} "
        f"shared_evaluations_per_min={shared['evaluations_per_min']:.1f} "
        f"collector_jobs_per_min={ours['collector_jobs_per_min']:.1f} "
        f"idle_collector_jobs_per_min={idle['collector_jobs_per_min']:.1f} "
        f"shared_collector_jobs_per_min={shared['collector_jobs_per_min']:.1f} "
        f"ratio_vs_idle={ours['evaluations_per_min'] / max(idle['evaluations_per_min'], 1e-9):.2f} "
        f"ratio_shared_vs_idle={shared['evaluations_per_min'] / max(idle['evaluations_per_min'], 1e-9):.2f} "
        f"held_max_s={max(ours['held_max_s'], shared['held_max_s']):.1f} "
        f"overlaps={ours['overlaps'] + shared['overlaps']:.0f} receivers={args.receivers}"
    )


if __name__ == "__main__":
    main()
