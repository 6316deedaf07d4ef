"""A net-snmp ``pass_persist`` handler serving N ports of IF-MIB ifTable/ifXTable with
controllable values: the table for snmpd integration tests and the SNMP benchmark.

    pass_persist .1.3.6.1.2.1.31.1.1.1 python pass_persist_iftable.py --ports 1024 --state s.json
    pass_persist .1.3.6.1.2.1.2.2.1    python pass_persist_iftable.py --ports 1024 --state s.json

Protocol (snmpd.conf(5)): ``PING`` → ``PONG``; ``get``/``getnext`` + OID → three lines
(OID, type, value) or ``NONE``. Every varbind is one pipe round trip, so the table is built once
and answered by bisection.

The optional JSON ``--state`` file (re-read when its mtime changes) controls edge cases::

    {"values": {"1.3.6.1.2.1.31.1.1.1.6.2": ["counter64", "18446744073709551615"]},
     "omit": ["1.3.6.1.2.1.31.1.1.1.10"],         # a column (or single cell) the agent lacks
     "ports": 8}                                    # overrides --ports

Real devices' quirks (issue 14), all optional::

     "ifindexes": [1, 2, 5, 1001],                  # the rows served (gaps), instead of 1..ports
     "names": {"1001": "Tunnel1"},                  # ifName per ifIndex (default Ethernet<ifIndex>)
     "ift32": true,                                 # also serve ifInOctets/ifOutOctets/ifIn-,
                                                    #   ifOutUcastPkts (32-bit) and ifSpeed
     "speed_bps": {"5": 1000000000},                # ifSpeed per ifIndex (default 10 Gb/s)
     "rates": {"1": [125000000, 2500000]},          # octets/s in, out: counters grow with time
     "epoch": 1764600000.5,                         #   from this Unix time (default: file's mtime)
     "refresh_s": 3                                 # counters move only every refresh_s (a cache)

Default cell values are deterministic functions of (ifIndex, column) so a test can predict them;
with "rates" the octet counters are ``default + rate x (t - epoch)`` (t quantized to refresh_s),
the 32-bit ones that modulo 2**32.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import sys
import time
from pathlib import Path

IFX = "1.3.6.1.2.1.31.1.1.1"
IFT = "1.3.6.1.2.1.2.2.1"
ROOTS = (tuple(map(int, IFX.split("."))), tuple(map(int, IFT.split("."))))

Cell = tuple[tuple[int, ...], str, str]


def default_value(column: str, ifindex: int) -> tuple[str, str]:
    """The value a fresh table serves: predictable, distinct per port and column."""
    table = {
        f"{IFX}.1": ("string", f"Ethernet{ifindex}"),
        f"{IFX}.6": ("counter64", str(10**12 + ifindex * 1000 + 6)),
        f"{IFX}.7": ("counter64", str(10**9 + ifindex * 100 + 7)),
        f"{IFX}.10": ("counter64", str(2 * 10**12 + ifindex * 1000 + 10)),
        f"{IFX}.11": ("counter64", str(2 * 10**9 + ifindex * 100 + 11)),
        f"{IFX}.15": ("gauge", "400000"),
        f"{IFX}.19": ("timeticks", "0"),
        f"{IFT}.8": ("integer", "1" if ifindex % 16 else "2"),  # every 16th port down
        f"{IFT}.13": ("counter", str(ifindex * 3 + 13)),
        f"{IFT}.14": ("counter", str(ifindex * 3 + 14)),
        f"{IFT}.19": ("counter", str(ifindex * 3 + 19)),
    }
    return table[column]


COLUMNS = (f"{IFX}.1", f"{IFX}.6", f"{IFX}.7", f"{IFX}.10", f"{IFX}.11", f"{IFX}.15", f"{IFX}.19",
           f"{IFT}.8", f"{IFT}.13", f"{IFT}.14", f"{IFT}.19")  # fmt: skip
# ifTable's 32-bit counters and ifSpeed: served with "ift32" (what a FastEthernet-era switch has)
IFT32 = {f"{IFT}.10": f"{IFX}.6", f"{IFT}.16": f"{IFX}.10", f"{IFT}.11": f"{IFX}.7", f"{IFT}.17": f"{IFX}.11"}
IF_SPEED = f"{IFT}.5"
RATE_OF = {f"{IFX}.6": 0, f"{IFX}.10": 1}  # HC octet column → index in a "rates" pair


def counter_at(column: str, ifindex: int, state: dict[str, object], now: float) -> int:
    """An octet counter's value now: the default plus what its rate added since the epoch."""
    base = int(default_value(column, ifindex)[1])
    rates: dict[str, list[float]] = state.get("rates", {})  # type: ignore[assignment]
    pair = rates.get(str(ifindex))
    if not pair or column not in RATE_OF:
        return base
    epoch = float(state.get("epoch", now))  # type: ignore[arg-type]
    refresh = float(state.get("refresh_s", 0) or 0)  # type: ignore[arg-type]
    elapsed = max(0.0, now - epoch)
    if refresh > 0:
        elapsed = math.floor(elapsed / refresh) * refresh
    return base + round(pair[RATE_OF[column]] * elapsed)


def build(ports: int, state: dict[str, object], now: float | None = None) -> list[Cell]:
    now = time.time() if now is None else now
    ports = int(state.get("ports", ports))  # type: ignore[call-overload]
    values: dict[str, list[str]] = state.get("values", {})  # type: ignore[assignment]
    omit = set(state.get("omit", []))  # type: ignore[call-overload]
    rows = [int(i) for i in state.get("ifindexes", range(1, ports + 1))]  # type: ignore[attr-defined]
    names: dict[str, str] = state.get("names", {})  # type: ignore[assignment]
    speeds: dict[str, int] = state.get("speed_bps", {})  # type: ignore[assignment]
    columns = list(COLUMNS)
    if state.get("ift32"):
        columns += [*IFT32, IF_SPEED]
    cells: list[Cell] = []
    for column in columns:
        if column in omit:
            continue
        for ifindex in rows:
            oid = f"{column}.{ifindex}"
            if oid in omit:
                continue
            if oid in values:
                kind, value = values[oid]
            elif column == f"{IFX}.1":
                kind, value = "string", names.get(str(ifindex), f"Ethernet{ifindex}")
            elif column in IFT32:
                hc = IFT32[column]
                kind, value = "counter", str(counter_at(hc, ifindex, state, now) % 2**32)
            elif column == IF_SPEED:
                kind, value = "gauge", str(min(int(speeds.get(str(ifindex), 10**10)), 2**32 - 1))
            elif column in RATE_OF:
                kind, value = "counter64", str(counter_at(column, ifindex, state, now))
            else:
                kind, value = default_value(column, ifindex)
            cells.append((tuple(map(int, oid.split("."))), kind, value))
    for oid, (kind, value) in values.items():  # extra cells beyond the generated ones
        key = tuple(map(int, oid.split(".")))
        if not any(c[0] == key for c in cells):
            cells.append((key, kind, value))
    cells.sort()
    return cells


def serve(ports: int, state_path: Path | None) -> None:
    mtime: float | None = None
    state: dict[str, object] = {}
    built_at = 0.0
    cells: list[Cell] = build(ports, {})
    keys = [c[0] for c in cells]
    out = sys.stdout
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "PING":
            out.write("PONG\n")
            out.flush()
            continue
        if cmd not in ("get", "getnext", "set"):
            continue
        oid_text = sys.stdin.readline().strip().lstrip(".")
        if cmd == "set":
            sys.stdin.readline()
            out.write("not-writable\n")
            out.flush()
            continue
        if state_path is not None:
            try:
                m = os.stat(state_path).st_mtime
            except OSError:
                m = None
            if m != mtime:
                mtime = m
                state = json.loads(state_path.read_text()) if m is not None else {}
                state.setdefault("epoch", m)
                cells = build(ports, state)
                keys = [c[0] for c in cells]
            elif state.get("rates") and time.time() - built_at > 0.002:  # moving counters: as of now
                cells = build(ports, state)  # (at most every 2 ms: one GETBULK is one varbind a pipe trip)
                built_at = time.time()
        oid = tuple(int(x) for x in oid_text.split(".") if x)
        if cmd == "get":
            i = bisect.bisect_left(keys, oid)
            hit = i < len(keys) and keys[i] == oid
        else:
            i = bisect.bisect_right(keys, oid)
            root = next((r for r in ROOTS if oid[: len(r)] == r), None)
            root = root or next((r for r in sorted(ROOTS) if oid < r), None)
            hit = i < len(keys) and root is not None and keys[i][: len(root)] == root
        if hit:
            key, kind, value = cells[i]
            out.write(f".{'.'.join(map(str, key))}\n{kind}\n{value}\n")
        else:
            out.write("NONE\n")
        out.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", type=int, default=64)
    parser.add_argument("--state", type=Path, default=None)
    args = parser.parse_args()
    serve(args.ports, args.state)


if __name__ == "__main__":
    main()
