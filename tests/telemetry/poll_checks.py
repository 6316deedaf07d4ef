"""What every poll record says about double polling, for the handover and multi-worker tests.

A poll record is a dict with the switch, the tick it was scheduled for (``scheduled``, ns), when it
started and finished (ns) and who made it (``pid``), as ``collector_process.py`` prints them and
``fabricmon.telemetry.poll_journal`` writes them.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable


def double_polls(polls: Iterable[dict]) -> list[str]:
    """Every double poll: a tick of a switch polled twice, or a switch polled by two processes at
    once (one's poll starting before the other's finished). Empty when there are none."""
    by_switch: dict[str, list[dict]] = defaultdict(list)
    for x in polls:
        by_switch[x["switch"]].append(x)
    found: list[str] = []
    for switch, recs in by_switch.items():
        recs.sort(key=lambda x: x["started"])
        seen: dict[int, int] = {}
        for x in recs:
            if x["scheduled"] in seen:
                found.append(f"{switch}: tick {x['scheduled']} polled by {seen[x['scheduled']]} and {x['pid']}")
            seen[x["scheduled"]] = x["pid"]
        for a, b in itertools.pairwise(recs):
            if a["pid"] != b["pid"] and a["finished"] > b["started"]:
                found.append(f"{switch}: polled by {a['pid']} and {b['pid']} at once")
    return found
