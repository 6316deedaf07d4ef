"""The What-if verbs: read a run once through the owners (matrices from ``TrafficMatrix`` rows,
events through ``jobs/blocks.py``, the fabric through ``topology/fabric_view.py``, the measured
per-port bytes from the phase views) and hand the arrays to ``core.whatif.report``.

    TrafficMatrix rows ─(one query, jobs/matrix_read: stored width or sparse cells, no int64
                        widening; "same as sent" received matrices not read twice)─▶ Accumulator
    event blocks ─(columns concatenated; core/whatif/event_stats)─▶ per-(step, layer, phase) median
                        start/end, bytes, timed collectives' rates
    phase views (attributed, PXN) ─▶ measured per-port bytes per (layer, phase)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from collectors.traces.schema import PHASES
from fabricmon.core.phases.layout import FabricLayout, RankPlacement, place_ranks
from fabricmon.core.whatif import event_stats
from fabricmon.core.whatif.matrix_pass import Matrix, SparseCells
from fabricmon.core.whatif.report import RANK_WINDOW_STEPS, Accumulator, Params, whatif
from fabricmon.core.whatif.scheduler_export import (
    k8s_node_labels,
    kubectl_commands,
    slurm_topology_conf,
    slurm_topology_yaml,
)
from fabricmon.jobs import blocks, matrix_parts, matrix_read
from fabricmon.jobs.models import RankMapEntry, Run, TrafficMatrix
from fabricmon.phases import services as phase_services
from fabricmon.phases.state import NoViewError
from fabricmon.topology.fabric_view import fabric_view


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
    """The events' per-(step, layer, phase) median start/end and bytes, the timed collectives'
    fast/slow rates and the sized collectives' median bytes (``core.whatif.event_stats``): the
    run's blocks read once, their columns concatenated, everything else array operations."""
    index: dict[str, int] = {}
    parts: dict[str, list[np.ndarray]] = {name: [] for name in _EVENT_COLUMNS}
    groups: list[np.ndarray] = []
    for _, cols in blocks.read_blocks(sorted(blocks.block_ids(run))):
        for name in _EVENT_COLUMNS:
            parts[name].append(np.asarray(getattr(cols, name), dtype=np.int64))
        groups.append(event_stats.factorise(cols.pg_ranks, index))

    def joined(chunks: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)

    ev = event_stats.EventArrays(**{name: joined(parts[name]) for name in _EVENT_COLUMNS},
                                 group=joined(groups), groups=tuple(index))
    return event_stats.summarise(ev, host_of_rank, PHASES)


_EVENT_COLUMNS = ("step", "layer", "phase", "start_ns", "end_ns", "bytes_sent")


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
    matrix_parts.settle(run)
    rows = TrafficMatrix.objects.filter(run=run, step__gte=0, layer__gte=0)
    top = rows.order_by("-n_ranks").values_list("n_ranks", flat=True).first()
    if top is None:
        raise WhatIfError("no per-(step, layer, phase) traffic matrices for this run yet")
    world = int(run.world_size or top)
    placement = _placement(run, layout, world)
    host_of_rank = np.where(
        placement.gpu_of_rank >= 0, layout.gpu_host[np.maximum(placement.gpu_of_rank, 0)], -1
    )
    used = np.unique(host_of_rank[host_of_rank >= 0])  # the run's hosts, numbered 0… in fabric order
    server_of_rank = np.where(host_of_rank >= 0, np.searchsorted(used, host_of_rank), -1).astype(np.int64)
    ev = _events(run, host_of_rank)
    newest: dict[tuple[int, int, str], int] = {}
    for mid, step, layer, phase in rows.values_list("id", "step", "layer", "phase").order_by("id"):
        newest[(step, layer, phase)] = mid  # several sources: the newest row (as the phase views)
    window = set(sorted({k[0] for k in newest})[-RANK_WINDOW_STEPS:])
    acc = Accumulator(server_of_rank, max(1, len(used)), rank_steps=window, expected_keys=len(newest))
    for m in matrix_read.read_cells(newest.values()):  # one query, each blob in its stored form
        key = (m.step, m.layer, m.phase)
        acc.add(
            key,
            _matrix(m.sent, world),
            None if m.received is None else _matrix(m.received, world),
            event_bytes=ev["bytes"].get(key, math.nan),
            start_s=ev["start_s"].get(key, math.nan),
            end_s=ev["end_s"].get(key, math.nan),
        )
    link_gbs = float(np.median(layout.index.speed_bps[layout.nic_pos])) / 8e9 if layout.n_gpus else math.nan
    measured = _measured_ports(run, acc.layer_phases())
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


def _matrix(c: matrix_read.StoredCells, world: int) -> Matrix:
    """Stored cells as the pass takes them, in a world×world frame (a matrix written before the
    world grew is the top-left corner; one larger than the world is cut to it)."""
    if c.dense is None:
        assert c.index is not None and c.values is not None
        cells = SparseCells(c.n, c.index, c.values)
        if c.n == world:  # the stored cells as they are (the pass plans on their uint32 index)
            return cells
        if c.n < world:
            idx = c.index.astype(np.int64)
            return SparseCells(world, idx // c.n * world + idx % c.n, c.values)
        return cells.within(world)
    if c.n == world:
        return c.dense
    out = np.zeros((world, world), dtype=c.dense.dtype)
    n = min(world, c.n)
    out[:n, :n] = c.dense[:n, :n]
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
