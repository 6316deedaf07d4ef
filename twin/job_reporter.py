"""The twin's MoE job as a *reporting* job: its phases with their traffic matrices, its rank map,
and its phase events — posted through the probe's client path to the real ingest API.

::

    TwinJobRecording (offline, seeded: same MoeTraffic + Router + JobTimeline as a running Twin)
        │ phases: step, layer, dispatch|combine, [start, end) ns, N×N bytes, true port bytes
        ├─ rank_map(coverage=…)      → rank → host / local GPU / NIC / leaf port entries
        ├─ events(skew_ns_by_host=…) → collectors.probe.events_from_matrix per phase, host clocks skewed
        └─ report(IngestClient, run) → EventPoster (same client path as a real job)

The injections exist for the validation gates: a host clock skew (the probe's offset exchange
does not see a clock that was wrong when the events were stamped), a rank map covering only part
of the ranks, and — by recording under one routing and projecting under another — a routing
mismatch.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collectors.probe import EventPoster, IngestClient, events_from_matrix
from fabricmon.core.telemetry.frames import Frame
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.core.topology.spec import FabricSpec
from twin.config import TwinConfig
from twin.moe import MoeTraffic
from twin.routing import Router, Wiring
from twin.schedule import JobTimeline

NS = 1_000_000_000


@dataclass(frozen=True)
class RecordedPhase:
    """One phase of the twin's job with its rank×rank matrix and the twin's per-port truth."""

    step: int
    layer: int
    phase: str
    start_ns: int
    end_ns: int
    matrix: np.ndarray = field(repr=False)
    in_bytes: np.ndarray = field(repr=False)
    out_bytes: np.ndarray = field(repr=False)
    hot_gpu: int = -1


def rank_map_entries(fabric: FabricSpec, coverage: float = 1.0) -> list[dict[str, Any]]:
    """Rank r = GPU r of the fabric (host order, as twin.routing.Wiring numbers GPUs): host, local
    GPU, NIC and the leaf switch port it is cabled to. ``coverage`` < 1 keeps only the first ranks."""
    out: list[dict[str, Any]] = []
    for host in fabric.hosts:
        for g in sorted(host.gpus, key=lambda g: g.index):
            out.append({"rank": len(out), "host": host.name, "local_rank": g.index, "gpu": f"gpu{g.index}",
                        "nic": g.nic, "switch": g.switch, "switch_port": g.port})
    keep = round(coverage * len(out))
    return out[:keep]


def rank_hosts(fabric: FabricSpec) -> list[str]:
    """Host name of every rank, rank order."""
    return [h.name for h in fabric.hosts for _ in h.gpus]


class TwinJobRecording:
    """``duration_s`` of the twin's job from ``t0_ns``, recorded without running agents."""

    def __init__(
        self, cfg: TwinConfig, duration_s: float, t0_ns: int, fabric: FabricSpec | None = None
    ) -> None:
        self.cfg = cfg
        self.fabric = fabric or rail_optimized(
            cfg.name, servers=cfg.servers, gpus_per_server=cfg.gpus_per_server, spines=cfg.spines,
            speed_gbps=cfg.speed_gbps,
        )
        self.ports = build_port_index(self.fabric)
        self.wiring = Wiring(self.fabric, self.ports)
        self.router = Router(self.wiring, cfg.routing, seed=cfg.seed,
                             group_gpus=cfg.job.group_gpus(self.wiring.n_gpus))
        self.t0_ns = t0_ns
        end_ns = t0_ns + int(duration_s * NS)
        traffic = MoeTraffic(cfg.job, self.wiring.n_gpus, seed=cfg.seed)
        self.timeline = JobTimeline(traffic, self.router, self.ports.speed_bps, self.ports.host_facing, t0_ns,
                                    lossy=cfg.lossy, buffer_bytes=cfg.buffer_bytes, keep_s=duration_s + 60.0,
                                    keep_events=1 << 30)
        self.timeline.ensure(end_ns)
        # The timeline keeps port bytes, not matrices: replay the seeded job for the matrices
        # (dense N x N: a recording is for small fabrics, twin/moe.py DENSE_MAX_GPUS).
        replay = MoeTraffic(cfg.job, self.wiring.n_gpus, seed=cfg.seed)
        phases = [ph for ph in self.timeline.phases if ph.end_ns <= end_ns]
        matrices: dict[tuple[int, int, str], np.ndarray] = {}
        last_step = phases[-1].step if phases else -1
        for _ in range(last_step + 1):
            for lt in replay.next_step():
                matrices[(lt.step, lt.layer, "dispatch")] = lt.dispatch_bytes
                matrices[(lt.step, lt.layer, "combine")] = lt.combine_bytes
        self.phases = [
            RecordedPhase(ph.step, ph.layer, ph.kind, ph.start_ns, ph.end_ns,
                          matrices[(ph.step, ph.layer, ph.kind)], ph.in_bytes, ph.out_bytes, ph.hot_gpu)
            for ph in phases
        ]
        self.end_ns = end_ns

    @property
    def world_size(self) -> int:
        return self.wiring.n_gpus

    def window_bytes(self, a_ns: int, b_ns: int) -> tuple[np.ndarray, np.ndarray]:
        """What the twin's counters move by in [a, b): (in, out) bytes per port."""
        in_b, out_b, _ = self.timeline.window_bytes(a_ns, b_ns)
        return in_b, out_b

    def counter_frames(self, poll_s: float = 1.0) -> list[Frame]:
        """The twin's true per-port bytes of every ``poll_s`` interval as live-window frames (in/out
        rates): what a collector polling the twin's agents would have written for this time."""
        n = int((self.end_ns - self.t0_ns) / (poll_s * NS))
        edges = self.t0_ns + (np.arange(n + 1) * poll_s * NS).astype(np.int64)
        frames = []
        for a, b in itertools.pairwise(edges):
            in_b, out_b = self.window_bytes(int(a), int(b))
            metrics = {"in_bps": (in_b * 8 / poll_s).astype(np.float32),
                       "out_bps": (out_b * 8 / poll_s).astype(np.float32)}
            frames.append(Frame(self.fabric.name, self.ports.version, int(b), poll_s, metrics))
        return frames

    def rank_map(self, coverage: float = 1.0) -> list[dict[str, Any]]:
        """Rank r = GPU r of the fabric (host order); ``coverage`` < 1 keeps only the first ranks."""
        return rank_map_entries(self.fabric, coverage)

    def events(
        self, *, skew_ns_by_host: dict[int, int] | None = None, id_prefix: str = "twin"
    ) -> Iterator[dict[str, Any]]:
        """Per-rank phase events of every phase; ranks on a skewed host stamp times off by its skew."""
        hosts = rank_hosts(self.fabric)
        shift = np.zeros(self.world_size, dtype=np.int64)
        for h, skew in (skew_ns_by_host or {}).items():
            shift[self.wiring.gpu_host == h] = skew
        for ph in self.phases:
            for ev in events_from_matrix(ph.matrix, step=ph.step, layer=ph.layer, phase=ph.phase,
                                         start_ns=ph.start_ns, end_ns=ph.end_ns, id_prefix=id_prefix,
                                         hosts=hosts):
                s = int(shift[ev["rank"]])
                if s:
                    ev["start_ns"] += s
                    ev["end_ns"] += s
                yield ev

    def report(self, client: IngestClient, run_id: int, *, coverage: float = 1.0,
               skew_ns_by_host: dict[int, int] | None = None, measure_clock: bool = True) -> dict[str, int]:
        """Post the rank map and every event through the probe's EventPoster to a live server."""
        status, body = client.post_rank_map(run_id, self.rank_map(coverage))
        if status >= 300:
            raise RuntimeError(f"rank map rejected: {status} {body}")
        # the whole recording is submitted at once: bounded by its events, not by the spool's bytes
        poster = EventPoster(client, run_id, batch_size=2_000, max_buffer=1 << 22, max_buffer_bytes=1 << 36,
                             measure_clock=measure_clock)
        for ev in self.events(skew_ns_by_host=skew_ns_by_host):
            poster.submit(ev)
        stats = poster.close(timeout_s=300)
        return {"posted": stats.posted, "rejected": stats.rejected, "dropped": stats.dropped,
                "clock_offset_ns": poster.clock_offset_ns, "clock_rtt_ns": poster.clock_rtt_ns or 0}
