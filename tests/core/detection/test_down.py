"""Switches without data: one alert per switch, per stalled collector shard, or per stalled fabric.

One scalable unit, cut into shards of four the way the collectors cut it (``plan_shards``)::

    su1:0  leaf-r0 … leaf-r3
    su1:1  leaf-r4 … leaf-r7
    su1:2  spine0 … spine3
"""

from __future__ import annotations

import numpy as np
import pytest

from fabricmon.core.detection.conditions import Condition, conditions
from fabricmon.core.detection.config import DetectConfig
from fabricmon.core.detection.down import CollectionGroups
from fabricmon.core.detection.geometry import fabric_geometry
from fabricmon.core.detection.window import MovingState, detect_window
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.telemetry.shards import plan_shards
from tests.topologies import one_su_256_gpus

CFG = DetectConfig()


@pytest.fixture(scope="module")
def su():
    spec = one_su_256_gpus("su1")
    geo = fabric_geometry(build_port_index(spec), spec)
    groups = CollectionGroups.from_members(
        geo.index.switch_names, {s.shard_id: s.switches for s in plan_shards([spec], 4)})
    return geo, groups


class Fabric:
    """Windows of a fabric where the named switches send nothing; the state carried between them."""

    def __init__(self, geo, groups) -> None:
        self.geo, self.groups = geo, groups
        self.state = MovingState.initial(geo.n_ports)

    def window(self, silent: list[str]) -> list[Condition]:
        names = self.geo.index.switch_names
        util = np.where(self.geo.is_leaf_host, 0.3, 0.0).astype(np.float32)
        util[np.isin(self.geo.index.switch_of, [names.index(n) for n in silent])] = np.nan
        self.state, found = detect_window({"util": util}, self.geo, self.state, CFG,
                                          collection_groups=self.groups)
        return sorted((c for c in conditions(found, self.geo) if c.kind == "target_down"), key=lambda c: c.key)

    def settle(self, silent: list[str]) -> list[Condition]:
        """``down_windows`` windows of the same silence: every silent switch counts as down."""
        for _ in range(CFG.down_windows):
            out = self.window(silent)
        return out


LEAVES_4_7 = ["leaf-r4", "leaf-r5", "leaf-r6", "leaf-r7"]


def test_a_stalled_shard_is_one_alert_and_a_lone_switch_beside_it_its_own(su) -> None:
    """A collector polls its shard from one loop: when it stalls, its switches go silent together,
    below the fabric's half — one alert for the shard, not one per switch."""
    out = Fabric(*su).settle([*LEAVES_4_7, "leaf-r0"])
    assert [c.key for c in out] == ["leaf-r0", "shard su1:1"]
    shard = out[1]
    assert shard.summary.startswith("4 of the 4 switches of shard su1:1 without data at once "
                                    "(leaf-r4, leaf-r5, leaf-r6, leaf-r7): the collector polling that shard")
    assert shard.details == {"switches_down": 4, "switches": 4, "first": LEAVES_4_7}
    # the fabric's own roll-up still wins when most of the fabric is silent: one alert, not three
    everything = Fabric(*su).settle(list(su[0].index.switch_names[:9]))
    assert [(c.key, c.details["switches_down"]) for c in everything] == [("fabric", 9)]


def test_half_a_shard_starts_no_roll_up_but_holds_one(su) -> None:
    """Entering takes more than half of a shard; staying takes more than a quarter (and two): the
    switches of a stalled shard come back staggered, and the last two are the same stall."""
    fab = Fabric(*su)
    assert [c.key for c in fab.settle(LEAVES_4_7[:2])] == ["leaf-r4", "leaf-r5"]  # half: not a stall
    fab = Fabric(*su)
    assert [c.key for c in fab.settle(LEAVES_4_7)] == ["shard su1:1"]
    assert [c.key for c in fab.window(LEAVES_4_7[:3])] == ["shard su1:1"]  # leaf-r7 came back
    held = fab.window(LEAVES_4_7[:2])  # two of four: held
    assert [(c.key, c.details["first"]) for c in held] == [("shard su1:1", ["leaf-r4", "leaf-r5"])]
    tail = fab.window(LEAVES_4_7[:1])  # one left, below the hold: still the stall (its tail)
    assert [(c.key, c.details["first"]) for c in tail] == [("shard su1:1", ["leaf-r4"])]
    assert "still without data since the stall (leaf-r4)" in tail[0].summary
    assert [c.key for c in fab.window(LEAVES_4_7[:2])] == ["shard su1:1"]  # leaf-r5 just went silent
    assert [c.key for c in fab.window([])] == []  # the last one back: the stall resolves
    # leaf-r5 left the roll-up when it came back: silent again on its own, it is its own alert
    assert [c.key for c in fab.settle(["leaf-r5"])] == ["leaf-r5"]


def test_a_fabric_stall_keeps_its_stragglers_and_a_switch_silent_beside_them_is_its_own(su) -> None:
    """The tail of a fabric-wide stall (switches whose sessions come back last) stays the fabric's
    alert until each is back; a switch that goes silent meanwhile was no part of it."""
    geo, groups = su
    fab = Fabric(geo, groups)
    assert [c.key for c in fab.settle(list(geo.index.switch_names[:10]))] == ["fabric"]
    stragglers = ["leaf-r0", "spine0"]
    out = fab.window(stragglers)  # 2 of 12: below the fabric's hold fraction
    assert [(c.key, c.details["first"]) for c in out] == [("fabric", stragglers)]
    out = fab.settle([*stragglers, "leaf-r6"])
    assert [(c.key, (c.details or {}).get("first")) for c in out] == [("fabric", stragglers), ("leaf-r6", None)]
    assert [c.key for c in fab.window(["spine0", "leaf-r6"])] == ["fabric", "leaf-r6"]
    assert [c.key for c in fab.window(["leaf-r6"])] == ["leaf-r6"]  # the last straggler is back


def test_without_groups_only_the_fabric_rolls_up(su) -> None:
    geo, _ = su
    fab = Fabric(geo, None)
    assert [c.key for c in fab.settle(LEAVES_4_7)] == LEAVES_4_7


def test_groups_name_every_switch_and_the_hold_fraction_is_checked(su) -> None:
    geo, _ = su
    alone = CollectionGroups.from_members(geo.index.switch_names, {"a": ("leaf-r0", "leaf-r1")})
    assert alone.names[:2] == ("a", "leaf-r2") and len(alone.names) == 11  # the rest: one each
    with pytest.raises(ValueError, match="not one of the names"):
        CollectionGroups(np.array([0, 3]), ("a", "b"))
    with pytest.raises(ValueError, match="down_rollup_hold_fraction"):
        DetectConfig(down_rollup_hold_fraction=0.6)


def test_a_late_switch_is_not_down(su) -> None:
    """Cells missing from the frame but the switch heard from since (its data came after the frame
    was built): not down, and it does not count toward a roll-up either."""
    geo, groups = su
    names = geo.index.switch_names
    util = np.where(geo.is_leaf_host, 0.3, 0.0).astype(np.float32)
    util[np.isin(geo.index.switch_of, [names.index(n) for n in LEAVES_4_7])] = np.nan
    late = np.isin(np.arange(len(names)), [names.index("leaf-r4"), names.index("leaf-r5")])
    state = MovingState.initial(geo.n_ports)
    for _ in range(CFG.down_windows):
        state, found = detect_window({"util": util}, geo, state, CFG, collection_groups=groups, late_switches=late)
    assert sorted(c.key for c in conditions(found, geo) if c.kind == "target_down") == ["leaf-r6", "leaf-r7"]
