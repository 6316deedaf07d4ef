"""Pure units: how the switches of every fabric are split into collector shards."""

from __future__ import annotations

import pytest

from fabricmon.telemetry.shards import UnknownShardError, find_shard, plan_shards
from tests.topologies import four_leaf_two_spine, two_leaf_one_spine


def test_shards_are_deterministic_and_never_span_fabrics() -> None:
    a = four_leaf_two_spine("a", servers=4)  # 4 leaves + 2 spines
    b = two_leaf_one_spine("b", servers=4)  # 2 leaves + 1 spine
    shards = plan_shards([b, a], 4)
    assert [s.shard_id for s in shards] == ["a:0", "a:1", "b:0"]
    assert shards == plan_shards([a, b], 4)  # input order does not matter
    assert sorted(sum((s.switches for s in shards if s.fabric == "a"), ())) == sorted(sw.name for sw in a.switches)
    assert find_shard([a, b], 4, "b:0").switches == tuple(sorted(sw.name for sw in b.switches))
    with pytest.raises(UnknownShardError, match="a:7"):
        find_shard([a, b], 4, "a:7")
    with pytest.raises(ValueError, match="SHARD_SIZE"):
        plan_shards([a], 0)
