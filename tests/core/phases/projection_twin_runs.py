"""Shared twin ground truth for the projection / attribution / gate tests (pure: no agents)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from fabricmon.core.phases.assess import SourceView, assess
from fabricmon.core.phases.clocks import estimate_skew
from fabricmon.core.phases.layout import FabricLayout, place_ranks
from fabricmon.core.phases.projector import ProjectorCache
from fabricmon.core.phases.routing import Routing
from fabricmon.core.phases.timeline import PhaseTimeline
from twin.config import TwinConfig
from twin.job_reporter import TwinJobRecording

T0_NS = 1_800_000_000_000_000_000
CACHE = ProjectorCache()


@lru_cache(maxsize=16)
def recording(routing: str = "pxn", seconds: float = 40.0, seed: int = 0) -> TwinJobRecording:
    """8 servers × 4 GPUs, 2 spines; 40 s of job ≈ 110 steps."""
    return TwinJobRecording(TwinConfig(servers=8, gpus_per_server=4, spines=2, routing=routing, seed=seed),  # type: ignore[arg-type]
                            seconds, T0_NS)


def poll_edges(rec: TwinJobRecording, poll_s: float = 1.0, phase_ns: int = 123_456_789) -> np.ndarray:
    n = int((rec.end_ns - rec.t0_ns - phase_ns) / (poll_s * 1e9))
    return rec.t0_ns + phase_ns + (np.arange(n + 1) * poll_s * 1e9).astype(np.int64)


def measured(rec: TwinJobRecording, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = [rec.window_bytes(int(a), int(b)) for a, b in itertools.pairwise(edges)]
    return np.array([r[0] for r in rows]), np.array([r[1] for r in rows])


PXN = Routing("pxn")


def scenario(rec: TwinJobRecording, *, routing: Routing = PXN, coverage: float = 1.0,
             skew_ns_by_host: dict[int, int] | None = None,
             reported: Callable[[int], bool] | None = None, other_traffic: float = 0.0,
             noise_ns_by_host: dict[int, int] | None = None) -> dict[str, SourceView]:
    """The whole derived-view pipeline, as the phases app runs it, on the twin's job.
    ``reported(step)``: the job reports only the steps it accepts (a sampling probe);
    ``other_traffic``: counters on the run's NIC ports carry that many times the run's bytes more;
    ``noise_ns_by_host``: that host's event times scatter uniformly over [−n/3, +n] (one noisy
    offset sample per step, as a probe's exchange on a loaded host gives)."""
    layout = FabricLayout.from_spec(rec.fabric, rec.ports)
    placement = place_ranks(layout, rec.rank_map(coverage), rec.world_size)
    proj = CACHE.get(layout, placement, routing)
    keys: dict[tuple[int, int, str], int] = {}
    inst, rank, ends, starts = [], [], [], []
    rng = np.random.default_rng(3)
    jitter = {h: rng.uniform(-n / 3, n, 10_000).astype(np.int64) for h, n in (noise_ns_by_host or {}).items()}
    for ev in rec.events(skew_ns_by_host=skew_ns_by_host):
        if reported is not None and not reported(ev["step"]):
            continue
        host = int(rec.wiring.gpu_host[ev["rank"]])
        shift = int(jitter[host][ev["step"]]) if host in jitter else 0
        k = keys.setdefault((ev["step"], ev["layer"], ev["phase"]), len(keys))
        inst.append(k)
        rank.append(ev["rank"])
        starts.append(ev["start_ns"] + shift)
        ends.append(ev["end_ns"] + shift)
    inst_a, start_a, end_a = np.array(inst), np.array(starts), np.array(ends)
    clock = estimate_skew(inst_a, np.array(rank), end_a, rec.world_size)
    # phase window on the server's clock: the median over ranks (one skewed host cannot move it)
    order = np.argsort(inst_a, kind="stable")
    bounds = np.searchsorted(inst_a[order], np.arange(len(keys) + 1))
    s_med = np.array([np.median(start_a[order[a:b]]) for a, b in itertools.pairwise(bounds)]).astype(np.int64)
    e_med = np.array([np.median(end_a[order[a:b]]) for a, b in itertools.pairwise(bounds)]).astype(np.int64)
    by_key = {(p.step, p.layer, p.phase): p.matrix for p in rec.phases}
    pb = proj.project(np.stack([by_key[k] for k in keys]))
    edges = poll_edges(rec)
    m_in, m_out = measured(rec, edges)
    nics = layout.nic_pos[placement.gpu_of_rank[placement.gpu_of_rank >= 0]]
    if other_traffic:  # another job's bytes on the same NIC ports, ``other_traffic`` × the run's
        m_in, m_out = m_in.copy(), m_out.copy()
        m_in[:, nics] += other_traffic * m_in[:, nics].mean()
        m_out[:, nics] += other_traffic * m_out[:, nics].mean()
    return assess(phase_keys=list(keys), start_ns=s_med, end_ns=e_med, projected_in=pb.in_bytes,
                  projected_out=pb.out_bytes, coverage=placement.coverage,
                  clock_error_s=clock.error_bound_ns / 1e9, clock_noise_s=clock.noise_ns / 1e9,
                  offset_known=True, nic_ports=nics,
                  edges_ns=edges, measured_in=m_in, measured_out=m_out)


def timeline_of(rec: TwinJobRecording) -> PhaseTimeline:
    return PhaseTimeline.from_events([(p.step, p.layer, p.phase, p.start_ns, p.end_ns) for p in rec.phases])


def gate_summary(views: dict[str, SourceView]) -> dict[str, Any]:
    return {s: (v.verdict, [(g.name, g.verdict) for g in v.gates]) for s, v in views.items()}
