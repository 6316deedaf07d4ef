"""A net-snmp ``pass_persist`` handler serving any table written out as a JSON list of cells:
the switch recordings of discovery and LLDP tests (a system group, an IF-MIB with names and
gaps, an LLDP-MIB) without a pass_persist script per shape.

    pass_persist .1.3.6.1.2.1.1 python pass_persist_cells.py --root .1.3.6.1.2.1.1 --cells c.json

``cells.json`` is ``[["1.3.6.1.2.1.1.5.0", "string", "leaf-r0"], …]`` (types as snmpd.conf(5)
``pass`` names them: integer, gauge, counter, counter64, timeticks, string, octet, objectid);
re-read when its mtime changes, so a test can re-cable or renumber a running agent. Only the cells
under ``--root`` are served (snmpd runs one handler per registered root).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import sys
from pathlib import Path

Cell = tuple[tuple[int, ...], str, str]


def _oid(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.strip().lstrip(".").split(".") if x)


def load(path: Path, root: tuple[int, ...]) -> list[Cell]:
    cells = [(_oid(o), kind, str(value)) for o, kind, value in json.loads(path.read_text())]
    return sorted(c for c in cells if c[0][: len(root)] == root)


def serve(root: tuple[int, ...], path: Path) -> None:
    mtime: float | None = None
    cells: list[Cell] = []
    keys: list[tuple[int, ...]] = []
    out = sys.stdout
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "PING":
            out.write("PONG\n")
            out.flush()
            continue
        if cmd not in ("get", "getnext", "set"):
            continue
        oid = _oid(sys.stdin.readline())
        if cmd == "set":
            sys.stdin.readline()
            out.write("not-writable\n")
            out.flush()
            continue
        m = os.stat(path).st_mtime
        if m != mtime:
            mtime, cells = m, load(path, root)
            keys = [c[0] for c in cells]
        if cmd == "get":
            i = bisect.bisect_left(keys, oid)
            hit = i < len(keys) and keys[i] == oid
        else:
            i = bisect.bisect_right(keys, oid)
            hit = i < len(keys)
        if hit:
            key, kind, value = cells[i]
            out.write(f".{'.'.join(map(str, key))}\n{kind}\n{value}\n")
        else:
            out.write("NONE\n")
        out.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--cells", type=Path, required=True)
    args = parser.parse_args()
    serve(_oid(args.root), args.cells)


if __name__ == "__main__":
    main()
