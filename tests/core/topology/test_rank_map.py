"""Placing a job's ranks on a fabric (``core.topology.rank_map``): every way an entry names its
GPU, and an error naming each thing the fabric does not know."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fabricmon.core.topology.rank_map import FabricHosts, RankMapError, missing_ranks, ranges_text
from tests.topologies import two_leaf_two_spine

HOSTS = FabricHosts(two_leaf_two_spine("fab", servers=4))  # node001..node004, 2 GPUs each


def _place(**entry: object) -> dict[str, object]:
    return HOSTS.place({"rank": 0, **entry}).entry()


def test_host_and_local_rank_give_the_nic_and_its_rail_leaf_port() -> None:
    assert _place(host="node003", local_rank=1) == {
        "rank": 0, "host": "node003", "local_rank": 1, "gpu": "gpu1", "nic": "mlx5_1",
        "switch": "leaf-r1", "switch_port": "Ethernet3",
    }


def test_a_fully_qualified_or_upper_case_host_is_its_short_name() -> None:
    assert _place(host="NODE002.cluster.local", local_rank=0)["host"] == "node002"


def test_a_nic_places_the_rank_on_that_nic_and_an_unknown_one_is_named() -> None:
    assert _place(host="node001", nic="mlx5_1")["switch"] == "leaf-r1"
    with pytest.raises(RankMapError) as err:
        _place(host="node001", local_rank=0, nic="eth0")
    assert err.value.field == "nic" and "'eth0' is not a NIC of node001" in err.value.reason
    assert "mlx5_0, mlx5_1" in err.value.reason


def test_the_switch_port_wins_and_must_face_a_nic_of_the_fabric() -> None:
    assert _place(host="anything", switch="leaf-r0", switch_port="Ethernet4")["host"] == "node004"
    with pytest.raises(RankMapError) as err:
        _place(host="node001", switch="leaf-r0", switch_port="Ethernet99")
    assert err.value.field == "switch_port" and "leaf-r0:Ethernet99" in err.value.reason
    with pytest.raises(RankMapError) as err:
        _place(host="node001", switch="leaf-r9", switch_port="Ethernet1")
    assert "no switch 'leaf-r9'" in err.value.reason
    with pytest.raises(RankMapError) as err:  # a NIC that is not the one cabled there
        _place(host="node001", switch="leaf-r0", switch_port="Ethernet1", nic="mlx5_1")
    assert err.value.field == "nic" and "that is mlx5_0 of node001" in err.value.reason


def test_unknown_host_missing_or_too_large_local_rank_are_named() -> None:
    with pytest.raises(RankMapError) as err:
        _place(host="gpu-box-7", local_rank=0)
    assert err.value.field == "host" and "'gpu-box-7' is not in fabric 'fab'" in err.value.reason
    assert "node001" in err.value.reason and "FABRICMON_HOST" in err.value.reason
    with pytest.raises(RankMapError) as err:
        _place(host="node001")
    assert err.value.field == "local_rank" and "LOCAL_RANK" in err.value.reason
    with pytest.raises(RankMapError) as err:
        _place(host="node001", local_rank=5)
    assert "node001 has GPUs 0–1" in err.value.reason


def test_build_numbers_ranks_host_by_host_and_names_unknown_hosts() -> None:
    placed, errors = HOSTS.build(["node002", "nope", "node001"])
    assert [(p.rank, p.host, p.local_rank) for p in placed] == [
        (0, "node002", 0), (1, "node002", 1), (4, "node001", 0), (5, "node001", 1),
    ]  # the unknown host's ranks 2-3 stay unplaced; the next host keeps its numbers
    assert [(i, e.field) for i, e in errors] == [(1, "host")]
    placed, errors = HOSTS.build(["node001"], gpus_per_host=4, first_rank=8)
    assert [p.rank for p in placed] == [8, 9] and "node001 has 2 GPUs" in errors[0][1].reason


def test_ranges_text_and_missing_ranks() -> None:
    assert ranges_text([7, 0, 1, 2, 3, 9, 10]) == "0–3, 7, 9–10"
    assert ranges_text(range(0, 40, 2), most=3) == "0, 2, 4 … (and 17 more)"
    assert missing_ranks([0, 2, 5], 6) == [1, 3, 4]


@given(st.sets(st.integers(0, 200), max_size=60))
def test_ranges_text_lists_each_number_once(numbers: set[int]) -> None:
    text = ranges_text(numbers, most=10**6)
    back: set[int] = set()
    for part in filter(None, text.split(", ")):
        a, _, b = part.partition("–")
        back |= set(range(int(a), int(b or a) + 1))
    assert back == numbers
