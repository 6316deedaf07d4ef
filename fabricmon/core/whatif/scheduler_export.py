"""The fabric as schedulers read it: Slurm ``topology.conf`` (topology/tree), Slurm ``topology.yaml``
(topology/block, Slurm ≥ 24.05) and Kubernetes node labels.

A rail-optimized scalable unit (SU) is the set of hosts that share the same rail leaves::

    spine0 … spineS           SwitchName=spine0 Switches=su1-r[0-7],su2-r[0-7]
    su1-r0 … su1-r7           SwitchName=su1-r0 Nodes=node[001-032]   (every host of the SU, rail 0)
    node001 … node032

So a node is listed under each of its rail leaves (the tree is what Slurm's topology/tree plugin
accepts; it places a job to minimise the switch level it spans). The block form is one block per SU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fabricmon.core.topology.spec import FabricSpec

LABEL_PREFIX = "topology.fabricmon.io"


def hostlist(names: list[str]) -> str:
    """Slurm's compressed host list: node001,node002,node003,gpu7 → node[001-003],gpu7."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for n in names:
        m = re.fullmatch(r"(.*?)(\d+)", n)
        if not m:
            plain.append(n)
            continue
        groups.setdefault((m.group(1), len(m.group(2))), []).append(int(m.group(2)))
    out = []
    for (prefix, width), found in groups.items():
        nums = sorted(set(found))
        runs, start, prev = [], nums[0], nums[0]
        for x in [*nums[1:], None]:
            if x is not None and x == prev + 1:
                prev = x
                continue
            runs.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
            if x is not None:
                start = prev = x
        single = len(runs) == 1 and "-" not in runs[0]
        out.append(f"{prefix}{runs[0]}" if single else f"{prefix}[{','.join(runs)}]")
    return ",".join(out + plain)


@dataclass(frozen=True)
class ScalableUnit:
    name: str
    leaves: tuple[str, ...]  # by rail
    hosts: tuple[str, ...]


def scalable_units(fabric: FabricSpec) -> list[ScalableUnit]:
    """Hosts grouped by the set of leaves their NICs land on, in host order."""
    by_leaves: dict[tuple[str, ...], list[str]] = {}
    for h in fabric.hosts:
        leaves = tuple(g.switch for g in sorted(h.gpus, key=lambda g: g.rail))
        by_leaves.setdefault(leaves, []).append(h.name)
    return [ScalableUnit(f"su{i}", leaves, tuple(hosts))
            for i, (leaves, hosts) in enumerate(by_leaves.items())]


def _spine_children(fabric: FabricSpec) -> dict[str, list[str]]:
    role = {sw.name: sw.role for sw in fabric.switches}
    out: dict[str, list[str]] = {sw.name: [] for sw in fabric.switches if sw.role == "spine"}
    for ln in fabric.links:
        for a, b in ((ln.a_switch, ln.b_switch), (ln.b_switch, ln.a_switch)):
            if role.get(a) == "spine" and role.get(b) == "leaf" and b not in out[a]:
                out[a].append(b)
    return out


def slurm_topology_conf(fabric: FabricSpec, leaf_level: str = "su") -> str:
    """topology.conf for topology/tree.

    ``leaf_level="su"`` (default): one switch per scalable unit holding its hosts (its rail leaves
    in a comment), the spines above — every node under exactly one leaf, as topology/tree expects.
    ``leaf_level="rail"``: the physical rail leaves, each listing its SU's hosts (Slurm warns
    "Multiple leaf switches contain nodes" — true of a rail-optimized fabric — and accepts it).
    """
    lines = [f"# {fabric.name}: exported by fabricmon from the topology database (topology/tree)"]
    sus = scalable_units(fabric)
    su_of_leaf = {leaf: su.name for su in sus for leaf in su.leaves}
    for su in sus:
        if leaf_level == "rail":
            lines += [f"SwitchName={leaf} Nodes={hostlist(list(su.hosts))}" for leaf in su.leaves]
        else:
            lines.append(f"# {su.name}: rail leaves {', '.join(su.leaves)}")
            lines.append(f"SwitchName={su.name} Nodes={hostlist(list(su.hosts))}")
    for spine, leaves in _spine_children(fabric).items():
        children = (leaves if leaf_level == "rail"
                    else sorted({su_of_leaf[x] for x in leaves if x in su_of_leaf}))
        if children:
            lines.append(f"SwitchName={spine} Switches={hostlist(children)}")
    return "\n".join(lines) + "\n"


def slurm_topology_yaml(fabric: FabricSpec) -> str:
    """topology.yaml (Slurm ≥ 24.05) with the tree and a block topology: one block per SU."""
    sus = scalable_units(fabric)
    out = ["---", f"- topology: {fabric.name}-tree", "  cluster_default: true", "  tree:", "    switches:"]
    for su in sus:
        for leaf in su.leaves:
            out += [f"      - switch: {leaf}", f"        nodes: {hostlist(list(su.hosts))}"]
    for spine, leaves in _spine_children(fabric).items():
        if leaves:
            out += [f"      - switch: {spine}", f"        children: {hostlist(leaves)}"]
    size = max(len(su.hosts) for su in sus) if sus else 0
    out += [f"- topology: {fabric.name}-block", "  block:", "    block_sizes:", f"      - {size}",
            "    blocks:"]
    for su in sus:
        out += [f"      - block: {su.name}", f"        nodes: {hostlist(list(su.hosts))}"]
    return "\n".join(out) + "\n"


def k8s_node_labels(fabric: FabricSpec) -> dict[str, dict[str, str]]:
    """Per node: its scalable unit, rail count, and the leaf of each rail (label values ≤ 63 chars)."""
    labels: dict[str, dict[str, str]] = {}
    for su in scalable_units(fabric):
        for host in su.hosts:
            lab = {f"{LABEL_PREFIX}/scalable-unit": su.name, f"{LABEL_PREFIX}/rails": str(len(su.leaves))}
            for rail, leaf in enumerate(su.leaves):
                lab[f"{LABEL_PREFIX}/rail-{rail}-leaf"] = leaf[:63]
            labels[host] = lab
    return labels


def kubectl_commands(labels: dict[str, dict[str, str]]) -> str:
    return "\n".join(
        "kubectl label node " + node + " --overwrite " + " ".join(f"{k}={v}" for k, v in lab.items())
        for node, lab in labels.items()
    ) + "\n"
