"""The What-if verbs: read a run once through the owners (matrices from ``TrafficMatrix`` rows,
events through ``jobs/blocks.py``, the fabric through ``topology/fabric_view.py``, the measured
per-port bytes from the phase views) and hand the arrays to ``core.whatif.report``.

    TrafficMatrix rows ─(one at a time)─▶ Accumulator (server matrices, per-(layer, phase) sums)
    event blocks ─▶ per-(step, layer, phase) median start/end, bytes, timed collectives' rates
    phase views (attributed, PXN) ─▶ measured per-port bytes per (layer, phase)
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from collectors.traces.schema import PHASES
from fabricmon.core.phases.layout import FabricLayout, RankPlacement, place_ranks
from fabricmon.core.whatif.report import RANK_WINDOW_STEPS, Accumulator, Params, whatif
from fabricmon.core.whatif.scheduler_export import (
    k8s_node_labels,
    kubectl_commands,
    slurm_topology_conf,
    slurm_topology_yaml,
)
from fabricmon.core.whatif.terrace_run import measured_ratio
from fabricmon.jobs import blocks
from fabricmon.jobs.models import RankMapEntry, Run, TrafficMatrix
from fabricmon.phases import services as phase_services
from fabricmon.phases.state import NoViewError
from fabricmon.topology.fabric_view import fabric_view

SIZED = ("allreduce", "allgather", "reducescatter")


class WhatIfError(Exception):
    """The run cannot be analysed (no fabric, no matrices); ``str()`` says why."""


def _placement(run: Run, layout: FabricLayout, world: int) -> RankPlacement:
    entries = list(
        RankMapEntry.objects.filter(run=run)
        .order_by("rank")
        .values("rank", "host", "local_rank", "switch", "switch_port")
    )
    return place_ranks(layout, entries, world)


def _events(run: Run, host_of_rank: np.ndarray) -> dict[str, Any]:
    """Per-(step, layer, phase) median start/end (s) and bytes; rates of collectives confined to one
    host (fast) or spread one rank per host (slow); median per-rank bytes of sized collectives."""
    starts: dict[tuple[int, int, str], list[int]] = defaultdict(list)
    ends: dict[tuple[int, int, str], list[int]] = defaultdict(list)
    sent: dict[tuple[int, int, str], float] = defaultdict(float)
    fast, slow = [], []
    sizes: dict[str, list[int]] = defaultdict(list)
    for _, cols in blocks.read_blocks(sorted(blocks.block_ids(run))):
        for i in range(len(cols.rank)):
            phase = PHASES[int(cols.phase[i])]
            key = (int(cols.step[i]), int(cols.layer[i]), phase)
            start, end = int(cols.start_ns[i]), int(cols.end_ns[i])
            if key[0] >= 0 and key[1] >= 0:
                starts[key].append(start)
                ends[key].append(end)
                sent[key] += float(cols.bytes_sent[i])
            if phase in SIZED:
                sizes[phase].append(int(cols.bytes_sent[i]))
            ranks = [int(x) for x in cols.pg_ranks[i].split(",") if x.strip().isdigit()]
            ranks = [r for r in ranks if 0 <= r < len(host_of_rank)]
            dur = (end - start) / 1e9
            if len(ranks) > 1 and dur > 0 and cols.bytes_sent[i] > 0:
                hosts = host_of_rank[ranks]
                if (hosts == hosts[0]).all() and hosts[0] >= 0:
                    fast.append(float(cols.bytes_sent[i]) / dur)
                elif len(set(hosts.tolist())) == len(ranks):
                    slow.append(float(cols.bytes_sent[i]) / dur)
    return {
        "start_s": {k: float(np.median(v)) / 1e9 for k, v in starts.items()},
        "end_s": {k: float(np.median(v)) / 1e9 for k, v in ends.items()},
        "bytes": dict(sent),
        "ratio": measured_ratio(np.asarray(fast), np.asarray(slow)),
        "rate_samples": {"fast": len(fast), "slow": len(slow)},
        "sizes": {k: float(np.median(v)) for k, v in sizes.items() if v},
    }


def _measured_ports(run: Run, lps: list[tuple[int, str]]) -> np.ndarray | None:
    """The phase views' attributed per-port bytes, mean over steps per (layer, phase); None when
    that view is withheld or the run has no counters."""
    try:
        snap = phase_services.phase_snapshot(run)
    except NoViewError:
        return None
    view = snap.views.get("attributed")
    if view is None or view.verdict == "withhold" or view.load_bytes is None:
        return None
    out = np.full((len(lps), view.load_bytes.shape[1]), np.nan)
    for j, lp in enumerate(lps):
        rows = [i for i, c in enumerate(view.columns) if (c[1], c[2]) == lp]
        if rows:
            out[j] = np.nanmean(view.load_bytes[rows], axis=0)
    return out


def run_whatif(run: Run, params: Params | None = None) -> dict[str, Any]:
    """Every What-if figure of ``run`` as plain data (``WhatIfError`` when there is nothing to use)."""
    params = params or Params()
    if not run.fabric:
        raise WhatIfError("the run names no fabric: the What-if needs the topology it ran on")
    view = fabric_view(run.fabric)
    layout = view.layout
    rows = TrafficMatrix.objects.filter(run=run, step__gte=0, layer__gte=0)
    top = rows.order_by("-n_ranks").values_list("n_ranks", flat=True).first()
    if top is None:
        raise WhatIfError("no per-(step, layer, phase) traffic matrices for this run yet")
    world = int(run.world_size or top)
    placement = _placement(run, layout, world)
    host_of_rank = np.where(
        placement.gpu_of_rank >= 0, layout.gpu_host[np.maximum(placement.gpu_of_rank, 0)], -1
    )
    used = sorted({int(h) for h in host_of_rank if h >= 0})
    server_of_rank = np.array([used.index(h) if h >= 0 else -1 for h in host_of_rank], dtype=np.int64)
    ev = _events(run, host_of_rank)
    newest: dict[tuple[int, int, str], int] = {}
    for mid, step, layer, phase in rows.values_list("id", "step", "layer", "phase").order_by("id"):
        newest[(step, layer, phase)] = mid  # several sources: the newest row (as the phase views)
    window = set(sorted({k[0] for k in newest})[-RANK_WINDOW_STEPS:])
    acc = Accumulator(server_of_rank, max(1, len(used)), rank_steps=window)
    by_id = {mid: key for key, mid in newest.items()}
    for m in (
        TrafficMatrix.objects.filter(pk__in=list(by_id))
        .order_by("step", "layer", "phase")
        .iterator(chunk_size=16)
    ):
        key = by_id[m.pk]
        sent, received = _sized(m.sent_array(), world), _sized(m.received_array(), world)
        acc.add(
            key,
            sent,
            received,
            event_bytes=ev["bytes"].get(key, math.nan),
            start_s=ev["start_s"].get(key, math.nan),
            end_s=ev["end_s"].get(key, math.nan),
        )
    link_gbs = float(np.median(layout.index.speed_bps[layout.nic_pos])) / 8e9 if layout.n_gpus else math.nan
    measured = _measured_ports(run, sorted(acc.sums))
    out = whatif(
        acc,
        layout,
        placement,
        params,
        link_gbs=link_gbs,
        ratio=ev["ratio"],
        measured=measured,
        port_names=[f"{r['switch']}:{r['port']}" for r in view.port_rows],
        measured_sizes=ev["sizes"],
    )
    out.update(
        {
            "run": run.pk,
            "fabric": run.fabric,
            "world": world,
            "rate_samples": ev["rate_samples"],
            "rank_map": {"coverage": placement.coverage, "problems": list(placement.problems[:20])},
            "params": _params_dict(params),
        }
    )
    return out


def _sized(a: np.ndarray, world: int) -> np.ndarray:
    if a.shape[0] == world:
        return a
    out = np.zeros((world, world), dtype=a.dtype)
    n = min(world, a.shape[0])
    out[:n, :n] = a[:n, :n]
    return out


def _params_dict(p: Params) -> dict[str, Any]:
    return {
        "top_k": p.top_k,
        "alpha": p.alpha,
        "region_servers": p.region_servers,
        "reconfig_ms": p.reconfig_ms,
        "routing": p.routing.label(),
        "assumed_ratio": p.assumed_ratio,
        "row_bytes": p.row_bytes,
    }


def exports(fabric_name: str, kind: str) -> tuple[str, str]:
    """(content type, body) of a scheduler export of the fabric."""
    spec = fabric_view(fabric_name).spec
    if kind == "topology.conf":
        return "text/plain", slurm_topology_conf(spec)
    if kind == "topology-rails.conf":
        return "text/plain", slurm_topology_conf(spec, leaf_level="rail")
    if kind == "topology.yaml":
        return "application/yaml", slurm_topology_yaml(spec)
    if kind == "k8s-labels.sh":
        return "text/plain", kubectl_commands(k8s_node_labels(spec))
    raise KeyError(kind)


EXPORTS = ("topology.conf", "topology-rails.conf", "topology.yaml", "k8s-labels.sh")
