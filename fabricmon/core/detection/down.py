"""Switches without data, and when many of them are one stall rather than many outages.

A switch is down after ``DetectConfig.down_windows`` windows in a row without data on any port.
Switches are not silenced one by one, though: a collector polls a shard of them from one event
loop, so a stalled or starved collector silences its whole shard at once, and a stalled collection
box or management network silences most of the fabric. Those are rolled up — one ``target_down``
for the fabric, or one per collection group (shard), instead of one per switch — which is what an
Alertmanager inhibition rule would do with them.

A roll-up starts when more than ``down_rollup_fraction`` of its switches (and at least two) are
down and holds while more than ``down_rollup_hold_fraction`` still are (hysteresis). Below that it
keeps its own members — the switches it stood for in the last window — until each is back: the
tail of a stall (a few switches whose sessions take longer to come back) is the same alert
resolving, not one new alert per straggler. A switch that goes down after the roll-up stopped
standing for it is its own alert.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fabricmon.core.detection.config import DetectConfig

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]

FABRIC_KEY = "fabric"


@dataclass(frozen=True)
class CollectionGroups:
    """Which switches are collected together (one collector shard each), by switch id."""

    of_switch: IntArray  # group index per switch id
    names: tuple[str, ...]  # group index → name ("twin:0", the shard id)

    def __post_init__(self) -> None:
        if len(self.of_switch) and (self.of_switch.min() < 0 or self.of_switch.max() >= len(self.names)):
            raise ValueError("CollectionGroups: a switch's group is not one of the names")

    @classmethod
    def from_members(
        cls, switch_names: tuple[str, ...], members: Mapping[str, tuple[str, ...]]
    ) -> CollectionGroups:
        """From group name → its switch names (a switch in none is its own group, named after it)."""
        names = list(members)
        group_of = {sw: g for g, sws in enumerate(members.values()) for sw in sws}
        of_switch = np.empty(len(switch_names), np.int64)
        for s, sw in enumerate(switch_names):
            if sw not in group_of:
                group_of[sw] = len(names)
                names.append(sw)
            of_switch[s] = group_of[sw]
        return cls(of_switch, tuple(names))


@dataclass(frozen=True)
class DownRollup:
    """One ``target_down`` standing for several switches silenced together."""

    key: str  # "fabric", or "shard <name>"
    down: IntArray  # switch ids without data
    total: int  # switches in the scope
    tail: bool = False  # held only by its members still down (below the hold fraction)


def down_switches(
    load: FloatArray, switch_of: npt.NDArray[np.integer[Any]], n_switches: int, before: IntArray | None,
    cfg: DetectConfig, *, late: BoolArray | None = None,
) -> tuple[IntArray, IntArray]:
    """Switches without data on any port for ``cfg.down_windows`` windows in a row, and the carried
    per-switch count of consecutive windows without data. ``late`` (per switch): its collector did
    hear from it within those windows, after the frame was built — late data, not an outage."""
    has_data = np.bincount(switch_of, weights=np.isfinite(load), minlength=n_switches) > 0
    if late is not None and len(late) == n_switches:
        has_data |= late
    if before is None or len(before) != n_switches:
        before = np.zeros(n_switches, np.int64)
    no_data = np.where(has_data, 0, before + 1).astype(np.int64)
    return np.flatnonzero(no_data >= cfg.down_windows).astype(np.int64), no_data


def _rolled(n_down: IntArray, size: IntArray, held: BoolArray, cfg: DetectConfig) -> BoolArray:
    start = n_down > cfg.down_rollup_fraction * size
    hold = held & (n_down > cfg.down_rollup_hold_fraction * size)
    return (n_down >= 2) & (start | hold)


def roll_up(
    down: IntArray,
    n_switches: int,
    groups: CollectionGroups | None,
    cfg: DetectConfig,
    *,
    was_groups: BoolArray | None = None,
    was_fabric: bool = False,
    was_covered: IntArray | None = None,
) -> tuple[tuple[DownRollup, ...], BoolArray, bool]:
    """The roll-ups of this window's down switches (the fabric's, else one per stalled group), and
    which are held for the next window (per group, the fabric's) given the last window's
    (``was_groups``, ``was_fabric``, and ``was_covered``: the switches its roll-ups stood for).
    Switches a roll-up covers get no alert of their own."""
    n_groups = len(groups.names) if groups is not None else 0
    if was_groups is None or len(was_groups) != n_groups:
        was_groups = np.zeros(n_groups, np.bool_)
    # members of the last window's roll-ups still down: they stay in their roll-up (its tail)
    kept = down[np.isin(down, was_covered)] if was_covered is not None and len(was_covered) else down[:0]
    fabric = bool(_rolled(np.array([len(down)]), np.array([n_switches]), np.array([was_fabric]), cfg)[0])
    if groups is None:
        if fabric:
            return (DownRollup(FABRIC_KEY, down, n_switches),), np.zeros(0, np.bool_), True
        if was_fabric and len(kept):
            return (DownRollup(FABRIC_KEY, kept, n_switches, tail=True),), np.zeros(0, np.bool_), True
        return (), np.zeros(0, np.bool_), False
    size = np.bincount(groups.of_switch, minlength=n_groups)
    n_down = np.bincount(groups.of_switch[down], minlength=n_groups)
    by_rule = _rolled(n_down, size, was_groups, cfg)
    tail = was_groups & ~by_rule & (np.bincount(groups.of_switch[kept], minlength=n_groups) > 0)
    rolled = by_rule | tail
    if fabric:  # the fabric's roll-up covers every group; the groups' holds carry on beneath it
        return (DownRollup(FABRIC_KEY, down, n_switches),), rolled, True
    out: list[DownRollup] = []
    if was_fabric and len(kept):  # the fabric stall's tail: it keeps its members, groups the rest
        out.append(DownRollup(FABRIC_KEY, kept, n_switches, tail=True))
        down, kept = down[~np.isin(down, kept)], kept[:0]
    for g in np.flatnonzero(rolled).tolist():
        members = (down if by_rule[g] else kept)
        members = members[groups.of_switch[members] == g]
        if len(members):
            out.append(DownRollup(f"shard {groups.names[g]}", members, int(size[g]), tail=not by_rule[g]))
    return tuple(out), rolled, bool(out) and out[0].key == FABRIC_KEY


def covered(rollups: tuple[DownRollup, ...]) -> IntArray:
    """The switches the roll-ups stand for (carried to the next window: ``was_covered``)."""
    if not rollups:
        return np.zeros(0, np.int64)
    return np.unique(np.concatenate([r.down for r in rollups])).astype(np.int64)


def uncovered(down: IntArray, rollups: tuple[DownRollup, ...]) -> IntArray:
    """The down switches no roll-up stands for: each is its own alert."""
    if not rollups:
        return down
    return down[~np.isin(down, np.concatenate([r.down for r in rollups]))]
