"""The in-operation figure of ``bench/snmp_poll.py``: CPU per varbind of a running shard process in
steady state, beside ``prometheus-snmp-exporter`` scraping the same switches at the same interval
from the same net-snmp agents::

    collector process (tests/telemetry/collector_process.py: services.run_shard, as one Celery
      pool child: the supervisor, leases, per-switch loops, rates, framing, Redis writes)
        ──SNMP──▶ snmpd × K (pass_persist IF-MIB)  ◀──SNMP── prometheus-snmp-exporter
                                                               ◀── HTTP scrape per switch per interval

The fabric is one scalable unit (``rail_optimized``: 8 rail leaves + 4 spines, 64 ports each),
its 12 switches spread over the K agents. CPU = utime + stime of the process from /proc over the
measured window, after a warm-up; varbinds = useful cells (ports x columns + sysUpTime) of the
polls that succeeded in the window, the exporter's = its ``fm_*`` samples.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import redis

from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.core.topology.spec import FabricSpec, SnmpSettings
from fabricmon.core.topology.yaml_dump import dump_fabric

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Operation:
    """One process's steady state over the measured window."""

    varbinds: int
    cpu_s: float
    window_s: float
    polls_ok: int
    polls_failed: int
    standby_cpu_s: float = 0.0  # the shard's standby process (collector_process beside the holder)

    @property
    def cpu_us_per_varbind(self) -> float:
        return self.cpu_s / max(1, self.varbinds) * 1e6

    @property
    def core_fraction(self) -> float:
        return self.cpu_s / self.window_s


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fabric_on(agent_ports: list[int], snmp: SnmpSettings) -> FabricSpec:
    """One SU (12 switches x 64 ports), switch k polled at agent k mod K."""
    spec = rail_optimized("benchop", servers=32, gpus_per_server=8, spines=4, snmp=snmp)
    switches = tuple(replace(sw, snmp=replace(sw.snmp, port=agent_ports[k % len(agent_ports)]))
                     for k, sw in enumerate(spec.switches))  # fmt: skip
    return replace(spec, switches=switches)


def cells_per_switch(spec: FabricSpec) -> dict[str, int]:
    return {sw.name: len(sw.ports) * 10 + 1 for sw in spec.switches}


def run_collector(spec: FabricSpec, workdir: Path, *, interval_s: float, warmup_s: float, window_s: float,
                  redis_url: str, profile_to: Path | None = None) -> Operation:  # fmt: skip
    """Run the shard process on ``spec``, measure its CPU over ``window_s`` after ``warmup_s``."""
    r = redis.Redis.from_url(redis_url)
    r.flushdb()  # the bench's own database (default db 9): no lease or read of an earlier run
    topology = workdir / "operation.yaml"
    topology.write_text(dump_fabric(spec))
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(REPO), "LOG_LEVEL": "WARNING"}
    argv = [sys.executable, "-m", "tests.telemetry.collector_process", str(topology), f"{spec.name}:0",
            redis_url, str(interval_s)]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)  # fmt: skip
    time.sleep(2.0)  # the first one holds the lease, the second stands by
    standby = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cells = cells_per_switch(spec)
    window: list[float] = [float("inf"), float("inf")]  # [start, end] in time.time_ns()/1e9
    counts = {"ok": 0, "failed": 0, "cells": 0}

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            rec = json.loads(line)
            if "switch" not in rec or not window[0] <= rec["finished"] / 1e9 < window[1]:
                continue
            counts["ok" if rec["ok"] else "failed"] += 1
            counts["cells"] += cells[rec["switch"]] if rec["ok"] else 0

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    spy: subprocess.Popen[bytes] | None = None
    try:
        time.sleep(warmup_s)  # both started (Django, imports) and in their steady state
        if proc.poll() is not None or standby.poll() is not None:
            raise SystemExit(f"collector process ended early (rc {proc.returncode}, {standby.returncode})")
        c0, s0, window[0] = proc_cpu_s(proc.pid), proc_cpu_s(standby.pid), time.time()
        if profile_to is not None:
            # Samples while the GIL is held (≈ CPU), raw stacks (collapse with any flamegraph tool).
            spy = subprocess.Popen(
                [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(proc.pid),
                 "--duration", str(int(window_s)), "--format", "raw", "--output", str(profile_to),
                 "--nonblocking", "--gil", "--rate", "400"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        time.sleep(window_s)
        c1, s1, window[1] = proc_cpu_s(proc.pid), proc_cpu_s(standby.pid), time.time()
    finally:
        for p in (standby, proc):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        reader.join(5)
        if spy is not None:
            spy.wait(30)
        r.flushdb()
    return Operation(counts["cells"], c1 - c0, window[1] - window[0], counts["ok"], counts["failed"], s1 - s0)


def run_exporter(spec: FabricSpec, exporter_base: str, exporter_pid: int, *, interval_s: float,
                 warmup_s: float, window_s: float) -> Operation:  # fmt: skip
    """Scrape every switch of ``spec`` once per interval (all concurrently), as Prometheus would."""
    url = exporter_base + "/snmp?target=127.0.0.1:{}&module=fabricmon_if"
    urls = [url.format(sw.snmp.port) for sw in spec.switches]

    def scrape(url: str) -> int:
        body = urllib.request.urlopen(url, timeout=30).read().decode()
        return sum(1 for line in body.splitlines() if line.startswith("fm_"))

    t_end_warm = time.monotonic() + warmup_s
    cells = ok = 0
    c0 = t0 = 0.0
    measuring = False
    with ThreadPoolExecutor(len(urls)) as pool:
        next_at = time.monotonic()
        while True:
            now = time.monotonic()
            if not measuring and now >= t_end_warm:
                measuring, c0, t0 = True, proc_cpu_s(exporter_pid), now
            if measuring and now - t0 >= window_s:
                break
            got = list(pool.map(scrape, urls))
            if measuring:
                cells += sum(got) + len(got)  # + sysUpTime, which ours reads and counts too
                ok += len(got)
            next_at += interval_s
            time.sleep(max(0.0, next_at - time.monotonic()))
        return Operation(cells, proc_cpu_s(exporter_pid) - c0, time.monotonic() - t0, ok, 0)


def report(name: str, op: Operation) -> None:
    print(f"    {name:<30} {op.varbinds:>7} varbinds in {op.window_s:5.1f} s, {op.polls_ok} polls ok "
          f"({op.polls_failed} failed), {op.cpu_s:5.2f} CPU-s = {op.core_fraction * 100:5.1f} % of a core, "
          f"{op.cpu_us_per_varbind:5.1f} CPU-µs/varbind")  # fmt: skip
    if op.standby_cpu_s:
        print(f"    {'':<30} its standby process: {op.standby_cpu_s:5.2f} CPU-s = "
              f"{op.standby_cpu_s / op.window_s * 100:5.1f} % of a core, "
              f"{op.standby_cpu_s / max(1, op.varbinds) * 1e6:5.1f} CPU-µs per varbind of its holder")
