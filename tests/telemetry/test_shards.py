"""Pure units: how the switches of every fabric are split into collector shards."""

from __future__ import annotations

import pytest

from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.telemetry.shards import UnknownShardError, find_shard, plan_shards


def test_shards_are_deterministic_and_never_span_fabrics() -> None:
    a = rail_optimized("a", servers=4, gpus_per_server=4, spines=2)  # 4 leaves + 2 spines
    b = rail_optimized("b", servers=4, gpus_per_server=2, spines=1)  # 2 leaves + 1 spine
    shards = plan_shards([b, a], 4)
    assert [s.shard_id for s in shards] == ["a:0", "a:1", "b:0"]
    assert shards == plan_shards([a, b], 4)  # input order does not matter
    assert sorted(sum((s.switches for s in shards if s.fabric == "a"), ())) == sorted(sw.name for sw in a.switches)
    assert find_shard([a, b], 4, "b:0").switches == tuple(sorted(sw.name for sw in b.switches))
    with pytest.raises(UnknownShardError, match="a:7"):
        find_shard([a, b], 4, "a:7")
    with pytest.raises(ValueError, match="SHARD_SIZE"):
        plan_shards([a], 0)
