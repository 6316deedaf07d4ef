"""``manage.py fabric_status [FABRIC] [--once] [--interval 1]`` — collector health and hottest ports."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from fabricmon.telemetry import services
from fabricmon.topology.models import Fabric


class Command(BaseCommand):
    help = "Per-switch collector health and the hottest ports of the latest frame, refreshed until Ctrl-C."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("fabric", nargs="?", help="fabric name (default: the only fabric)")
        parser.add_argument("--once", action="store_true", help="print once and exit")
        parser.add_argument("--interval", type=float, default=1.0, help="refresh period in seconds")
        parser.add_argument("--top", type=int, default=10, help="how many hot ports to list")

    def handle(self, *args: Any, **opts: Any) -> None:
        fabric = opts["fabric"] or self._only_fabric()
        if not Fabric.objects.filter(name=fabric).exists():
            known = ", ".join(Fabric.objects.values_list("name", flat=True)) or "(none — run load_topology)"
            raise CommandError(f"no fabric named {fabric!r}; known: {known}")
        try:
            while True:
                text = render(services.fabric_status(fabric, top=opts["top"]))
                if not opts["once"]:
                    self.stdout.write("\x1b[2J\x1b[H", ending="")  # clear screen, cursor home
                self.stdout.write(text)
                if opts["once"]:
                    return
                time.sleep(opts["interval"])
        except KeyboardInterrupt:
            return

    def _only_fabric(self) -> str:
        names = list(Fabric.objects.values_list("name", flat=True))
        if len(names) != 1:
            raise CommandError(f"name a fabric; known: {', '.join(names) or '(none — run load_topology)'}")
        return str(names[0])


def render(status: services.FabricStatus) -> str:
    now_ns = time.time_ns()
    lines = [f"fabric {status.fabric}"]
    lines.append(f"{'switch':<16} {'state':<5} {'last ok':>8} {'poll ms':>8} {'fails':>5}  "
                 f"{'collector':<24} errors")
    for name in sorted(status.health):
        h = status.health[name]
        last = h.get("last_success_ns")
        age = f"{(now_ns - last) / 1e9:.1f}s" if last else "never"
        counts = ", ".join(f"{k}={v}" for k, v in sorted(h.get("error_counts", {}).items()))
        err = f"{counts}  last: {h['last_error']}" if counts and not h.get("up") else counts
        poll_ms = h.get("poll_ms")
        # Health is written by whoever polls the switch; if nobody has for a while (every worker
        # holding its shard died), the last word is stale rather than "up".
        last_poll = h.get("last_poll_ns") or 0
        stale = now_ns - last_poll > 3 * float(h.get("interval_s", 1.0)) * 1e9 + 2e9
        state = "STALE" if stale else ("up" if h.get("up") else "DOWN")
        collector = (h.get("collector") or {}).get("process", "-")  # host:pid of the lease holder
        lines.append(
            f"{name:<16} {state:<5} {age:>8} "
            f"{(f'{poll_ms:.1f}' if poll_ms is not None else '-'):>8} "
            f"{h.get('consecutive_failures', 0):>5}  {collector:<24} {err}"
        )
    if not status.health:
        lines.append("(no switch has reported health yet)")
    lines.append("")
    if status.frame_ts_ns is None or not status.hot:
        lines.append(status.note or "latest frame has no utilisation data yet")
    else:
        lines.append(f"hottest ports (frame {(now_ns - status.frame_ts_ns) / 1e9:.1f}s ago)")
        lines.append(f"{'switch':<16} {'port':<14} {'peer':<28} {'util':>7} {'in Gb/s':>9} {'out Gb/s':>9}")
        for p in status.hot:
            lines.append(
                f"{p.switch:<16} {p.port:<14} {p.peer[:28]:<28} {p.util * 100:>6.1f}% "
                f"{p.in_bps / 1e9:>9.2f} {p.out_bps / 1e9:>9.2f}"
            )
        if status.note:
            lines.append(status.note)
    return "\n".join(lines) + "\n"
