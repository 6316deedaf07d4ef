"""SNMP polling benchmark: fabricmon's poller beside net-snmp ``snmpbulkwalk`` and
``prometheus-snmp-exporter`` doing the same work against the same agents.

Run (from the repository root, < 2 min on 2 cores):

    .venv/bin/python bench/snmp_poll.py                       # 4 switches x 1024 ports x 10 columns
    .venv/bin/python bench/snmp_poll.py --switches 2 --ports 256 --rounds 1 --no-twin   # quick

(a) Agents: one net-snmp ``snmpd`` per switch, its IF-MIB served by
    ``tests/agents/pass_persist_iftable.py`` (the agent costs are the same for every client).
    Every client reads the poller's 10 columns (ifXTable 6/7/10/11/15/19, ifTable 8/13/14/19):
    - ours-fast: ``SnmpPoller(engine="fast").poll_many`` — our own v2c client and BER decoder
      (``collectors/snmp/v2c.py``, ``ber.py``), one multi-column GETBULK walk per switch,
      all switches concurrently through one UDP socket.
    - ours-pysnmp: the same poller with ``engine="pysnmp"`` (pysnmp 7 + pyasn1 decoding).
      CPU for both = ``time.thread_time()`` of the polling thread (agents run elsewhere).
    - ``snmpbulkwalk -Cr25``: one walk per column, the switches in parallel. CPU =
      ``getrusage(RUSAGE_CHILDREN)`` of the walk processes.
    - ``prometheus-snmp-exporter`` (Go): one module walking the same columns (max_repetitions
      25), scraped for all switches concurrently; its own ``snmp_scrape_walk_duration_seconds``
      and CPU (from /proc) are printed too.
    Varbinds = useful cells (ports x columns), the same count for every tool.
(b) The fabric twin's agents (``twin.Twin``), if importable: both engines and snmpbulkwalk. The twin runs
    in this process (its agents share the GIL with our poller), so (b) understates our speed.

The last line is machine-readable: ``BENCH snmp_poll key=value …`` (unprefixed figures are
ours-fast); ratios are ours-fast/theirs in varbinds per second (> 1 = we are faster). The box is
shared: run it 2-3 times and read the range.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.snmp import IfSnapshot, SnmpPoller, SnmpTarget, close_loop_context
from collectors.snmp.oids import COLUMNS, dotted
from collectors.snmp.poller import Engine
from fabricmon.core.topology.spec import SnmpSettings
from tests.agents.netsnmp import Snmpd, start_snmpd

COLUMN_OIDS = [dotted(c.oid) for c in COLUMNS]
SETTINGS = SnmpSettings(timeout_s=5.0, retries=0, interval_s=30.0)


@dataclass
class Result:
    """One tool's totals over the measured rounds."""

    varbinds: int
    wall_s: float
    cpu_s: float | None

    @property
    def per_s(self) -> float:
        return self.varbinds / self.wall_s

    @property
    def cpu_us_per_varbind(self) -> float | None:
        return None if self.cpu_s is None else self.cpu_s / self.varbinds * 1e6


# --- ours ----------------------------------------------------------------------------------------


def bench_ours(
    endpoints: Sequence[tuple[str, int]], rounds: int, max_repetitions: int, engine: Engine
) -> Result:
    targets = [SnmpTarget(name, "127.0.0.1", port, SETTINGS) for name, port in endpoints]
    poller = SnmpPoller(max_repetitions=max_repetitions, engine=engine)

    async def main() -> Result:
        try:
            await poller.poll_many(targets)  # warm-up: pysnmp's first request per engine is slow
            cells, wall, cpu = 0, 0.0, 0.0
            for _ in range(rounds):
                c0, t0 = time.thread_time(), time.perf_counter()
                snaps = await poller.poll_many(targets)
                wall += time.perf_counter() - t0
                cpu += time.thread_time() - c0
                for s in snaps:
                    if not isinstance(s, IfSnapshot):
                        raise SystemExit(f"poll failed: {s}")
                    cells += len(s.ifindex) * (len(s.counters) + 3) + 1  # + speed, oper, discontinuity
            return Result(cells, wall, cpu)
        finally:
            close_loop_context()

    return asyncio.run(main())


# --- snmpbulkwalk --------------------------------------------------------------------------------


def bench_snmpbulkwalk(endpoints: Sequence[tuple[str, int]], rounds: int, workdir: Path) -> Result:
    env = {**os.environ, "SNMP_PERSISTENT_DIR": str(workdir / "cli"), "MIBS": ""}

    def walk_switch(port: int) -> int:
        lines = 0
        for oid in COLUMN_OIDS:
            out = subprocess.run(
                ["snmpbulkwalk", "-v2c", "-c", "public", "-On", "-Oq", "-Cr25", "-t", "5", "-r", "0",
                 f"127.0.0.1:{port}", oid],
                capture_output=True, env=env, check=True,
            ).stdout  # fmt: skip
            lines += out.count(b"\n")
        return lines

    cells, wall = 0, 0.0
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with ThreadPoolExecutor(len(endpoints)) as pool:
        for _ in range(rounds):
            t0 = time.perf_counter()
            cells += sum(pool.map(walk_switch, [p for _, p in endpoints]))
            wall += time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Result(cells, wall, cpu)


# --- prometheus-snmp-exporter ------------------------------------------------------------------------


def exporter_config(max_repetitions: int) -> str:
    """snmp.yml for exporter 0.21 (auth inside the module; ``auths:`` came in 0.23)."""
    lines = ["fabricmon_if:", "  walk:", *[f"  - {o}" for o in COLUMN_OIDS], "  metrics:"]
    for c in COLUMNS:
        lines += [
            f"  - name: fm_{c.key}",
            f"    oid: {dotted(c.oid)}",
            f"    type: {'counter' if c.kind.startswith('counter') else 'gauge'}",
            "    indexes:",
            "    - labelname: ifIndex",
            "      type: gauge",
        ]
    lines += ["  version: 2", f"  max_repetitions: {max_repetitions}", "  retries: 0", "  timeout: 10s",
              "  auth:", "    community: public"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_exporter(endpoints: Sequence[tuple[str, int]], rounds: int, workdir: Path) -> tuple[Result, float]:
    binary = shutil.which("prometheus-snmp-exporter") or "/usr/bin/prometheus-snmp-exporter"
    conf = workdir / "snmp.yml"
    conf.write_text(exporter_config(25))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        http_port = s.getsockname()[1]
    proc = subprocess.Popen(
        [binary, f"--config.file={conf}", f"--web.listen-address=127.0.0.1:{http_port}",
         "--no-snmp.wrap-large-counters", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{http_port}"
        for _ in range(200):
            try:
                urllib.request.urlopen(base + "/", timeout=1).read()
                break
            except OSError:
                time.sleep(0.05)

        def scrape(port: int) -> tuple[int, float]:
            url = f"{base}/snmp?target=127.0.0.1:{port}&module=fabricmon_if"
            body = urllib.request.urlopen(url, timeout=60).read().decode()
            samples = sum(1 for line in body.splitlines() if line.startswith("fm_"))
            walk = sum(float(m) for m in re.findall(r"^snmp_scrape_walk_duration_seconds (\S+)", body, re.M))
            return samples, walk

        scrape(endpoints[0][1])  # warm-up
        cells, wall, walk_s = 0, 0.0, 0.0
        c0 = _proc_cpu_s(proc.pid)
        with ThreadPoolExecutor(len(endpoints)) as pool:
            for _ in range(rounds):
                t0 = time.perf_counter()
                for samples, walk in pool.map(scrape, [p for _, p in endpoints]):
                    cells += samples
                    walk_s += walk
                wall += time.perf_counter() - t0
        return Result(cells, wall, _proc_cpu_s(proc.pid) - c0), walk_s
    finally:
        proc.terminate()
        proc.wait(10)


# --- the twin (optional) ---------------------------------------------------------------------------


def bench_twin(rounds: int, max_repetitions: int, workdir: Path) -> None:
    try:
        from twin.cluster import Twin
        from twin.config import TwinConfig
    except ImportError as exc:
        print(f"(b) twin: not available ({exc}); skipped")
        return
    with Twin(TwinConfig()) as tw:
        endpoints = [(sw.name, sw.snmp.port) for sw in tw.fabric.switches]
        fast = bench_ours(endpoints, rounds, max_repetitions, "fast")
        slow = bench_ours(endpoints, rounds, max_repetitions, "pysnmp")
        walk = bench_snmpbulkwalk(endpoints, rounds, workdir)
    print(f"(b) twin: {len(endpoints)} switches, {fast.varbinds // rounds} varbinds/round")
    report("ours-fast", fast)
    report("ours-pysnmp", slow)
    report("snmpbulkwalk", walk)
    print(f"    ratio ours-fast/snmpbulkwalk (varbinds/s): {fast.per_s / walk.per_s:.2f}")


def report(name: str, r: Result) -> None:
    cpu = "n/a" if r.cpu_us_per_varbind is None else f"{r.cpu_us_per_varbind:.1f} CPU-µs/varbind"
    print(f"    {name:<26} {r.varbinds:>7} varbinds in {r.wall_s:6.2f} s = {r.per_s:8.0f} varbinds/s, {cpu}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--switches", type=int, default=4)
    ap.add_argument("--ports", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-repetitions", type=int, default=25)
    ap.add_argument("--no-twin", action="store_true")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="fabricmon-bench-snmp-"))
    agents: list[Snmpd] = []
    t_start = time.perf_counter()
    try:
        agents = [start_snmpd(workdir / f"sw{k}", iftable_ports=args.ports) for k in range(args.switches)]
        endpoints = [(f"sw{k}", a.port) for k, a in enumerate(agents)]
        shape = f"{args.switches} switches x {args.ports} ports x {len(COLUMNS)} columns"
        print(f"(a) snmpd + pass_persist: {shape}, {args.rounds} round(s), max_rep {args.max_repetitions}")
        ours = bench_ours(endpoints, args.rounds, args.max_repetitions, "fast")
        report("ours-fast", ours)
        slow = bench_ours(endpoints, args.rounds, args.max_repetitions, "pysnmp")
        report("ours-pysnmp", slow)
        walk = bench_snmpbulkwalk(endpoints, args.rounds, workdir)
        report("snmpbulkwalk -Cr25", walk)
        exporter, walk_s = bench_exporter(endpoints, args.rounds, workdir)
        report("prometheus-snmp-exporter", exporter)
        print(f"    exporter's own snmp_scrape_walk_duration_seconds (sum): {walk_s:.2f} s")
        print(
            f"    ratios ours-fast/theirs (varbinds/s): snmpbulkwalk {ours.per_s / walk.per_s:.2f}, "
            f"exporter {ours.per_s / exporter.per_s:.2f}, ours-pysnmp {ours.per_s / slow.per_s:.2f}"
        )
        print(f"    CPU per varbind, ours-fast/snmpbulkwalk: "
              f"{ours.cpu_us_per_varbind / walk.cpu_us_per_varbind:.2f}")  # type: ignore[operator]  # fmt: skip
    finally:
        for a in agents:
            a.stop()
    if not args.no_twin:
        bench_twin(args.rounds, args.max_repetitions, workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"total bench wall time {time.perf_counter() - t_start:.1f} s")
    print(
        f"BENCH snmp_poll varbinds_per_s={ours.per_s:.0f} cpu_us_per_varbind={ours.cpu_us_per_varbind:.1f} "
        f"pysnmp_varbinds_per_s={slow.per_s:.0f} pysnmp_cpu_us_per_varbind={slow.cpu_us_per_varbind:.1f} "
        f"snmpbulkwalk_varbinds_per_s={walk.per_s:.0f} "
        f"snmpbulkwalk_cpu_us_per_varbind={walk.cpu_us_per_varbind:.1f} "
        f"exporter_varbinds_per_s={exporter.per_s:.0f} "
        f"ratio_vs_snmpbulkwalk={ours.per_s / walk.per_s:.2f} "
        f"ratio_vs_exporter={ours.per_s / exporter.per_s:.2f}"
    )


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
