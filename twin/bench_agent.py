"""Measure the twin's SNMP agent CPU: µs per varbind and % of a core for a 1 SU polled at 1 Hz.

    python -m twin.bench_agent [--version 2c|3] [--rounds 5] [--servers 32]

The twin runs in this process; net-snmp's ``snmpbulkwalk`` (C, separate processes, not counted)
walks ifXTable of every switch once per round — ~6 k varbinds per round on a 1 SU. Agent CPU =
this process's CPU while polling minus its CPU over an idle stretch of the same length (the
ticker and job model run in both).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time

from twin.cluster import Twin
from twin.config import TwinConfig

IFX = "1.3.6.1.2.1.31.1.1.1"


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _walk(tw: Twin, version: str) -> int:
    procs = []
    for sw in tw.fabric.switches:
        auth = ["-v2c", "-c", tw.cfg.community]
        if version == "3":
            u = tw.cfg.v3_user
            auth = ["-v3", "-l", "authPriv", "-u", u.name, "-a", u.auth_protocol, "-A", u.auth_key,
                    "-x", u.priv_protocol, "-X", u.priv_key]
        cmd = ["snmpbulkwalk", *auth, "-On", "-Cr25", "-t", "5", f"127.0.0.1:{sw.snmp.port}", IFX]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    return sum(len(p.communicate()[0].splitlines()) for p in procs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", choices=("2c", "3"), default="2c")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--servers", type=int, default=32)
    args = ap.parse_args()
    with Twin(TwinConfig(servers=args.servers, snmp_version=args.version)) as tw:
        _walk(tw, args.version)  # warm-up (pysnmp's first request is slow)
        c0, w0 = _cpu(), time.monotonic()
        vbs = sum(_walk(tw, args.version) for _ in range(args.rounds))
        busy_cpu, wall = _cpu() - c0, time.monotonic() - w0
        c1 = _cpu()
        time.sleep(wall)
        idle_cpu = _cpu() - c1
    agent_cpu = max(0.0, busy_cpu - idle_cpu)
    per_vb_us = agent_cpu / max(vbs, 1) * 1e6
    per_round = vbs / args.rounds
    print(
        f"snmp v{args.version}: {vbs} varbinds in {args.rounds} rounds "
        f"({per_round:.0f}/round, {wall:.2f} s wall); "
        f"agent CPU {agent_cpu:.3f} s (+ idle ticker {idle_cpu:.3f} s) → {per_vb_us:.1f} µs/varbind; "
        f"1 round per second = {per_round * per_vb_us / 1e4:.1f} % of a core"
    )


if __name__ == "__main__":
    main()
