"""Scheduler exports of a two-SU rail-optimized fabric (40 servers x 2 GPUs, 2 spines)."""

from __future__ import annotations

import yaml

from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.core.whatif.scheduler_export import hostlist, k8s_node_labels, slurm_topology_yaml


def _fabric():  # type: ignore[no-untyped-def]
    return rail_optimized("two-su", servers=40, gpus_per_server=2, spines=2, uplinks_per_leaf=32)


def test_hostlist_compresses_runs_and_keeps_width() -> None:
    assert hostlist(["node001", "node002", "node003", "node007", "login"]) == "node[001-003,007],login"
    assert hostlist(["gpu5"]) == "gpu5"


def test_topology_yaml_has_the_tree_and_one_block_per_su() -> None:
    doc = yaml.safe_load(slurm_topology_yaml(_fabric()))
    tree, block = doc
    assert tree["cluster_default"] and {s["switch"] for s in tree["tree"]["switches"]} >= {"spine0", "leaf-su1-r1"}
    assert [b["nodes"] for b in block["block"]["blocks"]] == ["node[001-032]", "node[033-040]"]
    assert block["block"]["block_sizes"] == [32]


def test_k8s_labels_name_su_and_rail_leaves() -> None:
    labels = k8s_node_labels(_fabric())
    assert labels["node033"] == {"topology.fabricmon.io/scalable-unit": "su1", "topology.fabricmon.io/rails": "2",
                                 "topology.fabricmon.io/rail-0-leaf": "leaf-su1-r0",
                                 "topology.fabricmon.io/rail-1-leaf": "leaf-su1-r1"}
    assert len(labels) == 40
