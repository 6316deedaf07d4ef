"""A shard collector as its own process, like one Celery pool child: for handover and kill tests.

    python -m tests.telemetry.collector_process TOPOLOGY.yaml SHARD_ID REDIS_URL INTERVAL_S

It holds the shard or stands by for it (``services.run_shard(standby=True)``) for as long as it
lives, and prints one JSON line per poll it makes (its pid, the switch, the tick, start and end).
SIGUSR1 asks it to hand the shard over now (then it stands by again); SIGTERM ends it gracefully;
SIGKILL is a worker dying.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path

import django


def main() -> int:
    topology, shard_id, redis_url, interval = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fabricmon.settings")
    os.environ["FABRICMON_SHARD_SIZE"] = "64"
    django.setup()
    from fabricmon.core.topology.yaml_load import load_fabric
    from fabricmon.telemetry import services

    spec = load_fabric(Path(topology).read_text())
    spec = replace(spec, switches=tuple(
        replace(sw, snmp=replace(sw.snmp, interval_s=interval, timeout_s=0.2, retries=1)) for sw in spec.switches))
    done = threading.Event()
    current: list[threading.Event] = [threading.Event()]
    signal.signal(signal.SIGUSR1, lambda *_: current[0].set())
    signal.signal(signal.SIGTERM, lambda *_: (done.set(), current[0].set()))
    pid = os.getpid()

    def observe(rec: object) -> None:
        r = rec  # a PollRecord
        line = {"pid": pid, "switch": r.switch, "tick": r.frame_tick_ns, "scheduled": r.scheduled_ns,  # type: ignore[attr-defined]
                "started": r.started_ns, "finished": r.finished_ns, "ok": r.error_kind is None}  # type: ignore[attr-defined]
        print(json.dumps(line), flush=True)

    while not done.is_set():
        stop = current[0] = threading.Event()
        report = services.run_shard(shard_id, standby=True, stop_event=stop, fabrics=[spec], redis_url=redis_url,
                                    observer=observe, history=False, protocols={})
        print(json.dumps({"pid": pid, "ended": report.ended, "took_over": report.took_over,
                          "gap_frames": report.gap_frames}), flush=True)
        if report.ended in ("standby_not_needed", "stopped"):
            done.wait(0.3)  # a holder that just handed over lets its standby take the shard first
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
