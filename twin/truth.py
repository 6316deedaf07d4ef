"""What the running twin knows that a collector must measure: exact per-port rates and counters,
the hottest port, queue state and watermarks, the job's phases, and its status.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.counters import METRICS, RATE_NAMES
from twin.gnmi_sources import queue_leaves


@dataclass(frozen=True)
class HotPort:
    """The port with the highest egress utilization over an interval, and what it faces."""

    switch: str
    ifindex: int
    peer: str
    utilization: float
    out_octets_per_s: float


class TwinTruth:
    """Mixed into :class:`twin.cluster.Twin` (reads its clock, queues, timeline and agents)."""

    def _slice(self, switch: str | None) -> slice:
        return self.ports.slice_of(switch) if switch is not None else slice(0, len(self.ports))

    def switch_ports(self, switch: str) -> list[dict[str, Any]]:
        """The switch's ports in PortIndex order (the order of every per-switch array here)."""
        sl = self.ports.slice_of(switch)
        return [
            {"position": p, "ifindex": int(self.ports.ifindex[p]), "name": self.ports.port_names[p],
             "peer": self.wiring.peer[p], "host_facing": bool(self.ports.host_facing[p])}
            for p in range(sl.start, sl.stop)
        ]

    def true_rates(self, switch: str | None, t1_ns: int, t2_ns: int) -> dict[str, np.ndarray]:
        """Per-port average rates over exactly [t1, t2] (bytes/s, pkts/s, discards/s)."""
        r = self.clock.mean_rates(t1_ns, t2_ns, self._slice(switch))
        return {name: r[:, k] for k, name in enumerate(RATE_NAMES)}

    def counters_at(self, switch: str | None, t_ns: int) -> dict[str, np.ndarray]:
        """Counter values (uint64) per port at ``t_ns``, as the agent would have answered then."""
        v = self._counters_at(t_ns, self._slice(switch))
        return {name: v[:, k] for k, name in enumerate(METRICS)}

    def hottest_port(self, t1_ns: int, t2_ns: int) -> HotPort:
        out = self.clock.mean_rates(t1_ns, t2_ns)[:, 1]
        util = out * 8.0 / self.ports.speed_bps
        p = int(np.argmax(util))
        return HotPort(
            switch=self.ports.switch_names[int(self.ports.switch_of[p])],
            ifindex=int(self.ports.ifindex[p]),
            peer=self.wiring.peer[p],
            utilization=float(util[p]),
            out_octets_per_s=float(out[p]),
        )

    def true_queue(self, switch: str | None, t_ns: int) -> dict[str, np.ndarray]:
        """Queue, ECN, PFC counters (uint64 per port) the gNMI target serves at ``t_ns``
        (twin.gnmi_sources.queue_leaves names), plus ``q_bytes``, the occupancy. Needs ``gnmi=True``."""
        if self.queues is None:
            raise RuntimeError("the queue model runs only with TwinConfig(gnmi=True)")
        cum = self.queues.counters_at(t_ns, self._slice(switch))
        out: dict[str, np.ndarray] = queue_leaves(cum, self.queues.cfg.pkt_bytes)
        out["q_bytes"] = cum["q_bytes"]
        return out

    def true_watermark(self, switch: str | None, t1_ns: int, t2_ns: int) -> np.ndarray:
        """Max egress queue occupancy per port over [t1, t2], whole bytes (what a read-and-clear
        watermark read at t2 reports when the previous clear was at t1). Needs ``gnmi=True``."""
        if self.queues is None:
            raise RuntimeError("the queue model runs only with TwinConfig(gnmi=True)")
        return np.floor(self.queues.peak_bytes(t1_ns, t2_ns, self._slice(switch))).astype(np.uint64)

    def phases(self, t1_ns: int, t2_ns: int) -> list[dict[str, object]]:
        """Phase events (step, layer, dispatch|combine, start/end ns, hot GPU) overlapping [t1, t2]."""
        return self.timeline.events(t1_ns, t2_ns)

    def hotspots(self, t1_ns: int, t2_ns: int) -> list[dict[str, Any]]:
        """The job's hotspot stretches overlapping [t1, t2]: consecutive steps with the same hot GPU,
        with the leaf port facing it (``hot_gpu`` −1 and no port: a balanced stretch). A soak run
        scores detection against these: each change between two hot GPUs is one migration.

        With several EP groups the hot expert is hot in every group (one gate, twin/moe.py):
        ``hot_gpu``/``port`` are group 0's, ``ports`` every group's (group order)."""
        groups = self.wiring.n_gpus // self.ep_gpus
        out: list[dict[str, Any]] = []
        for ev in self.timeline.events(t1_ns, t2_ns):
            gpu = int(ev["hot_gpu"])  # type: ignore[call-overload]
            start, end = int(ev["start_ns"]), int(ev["end_ns"])  # type: ignore[call-overload]
            if out and out[-1]["hot_gpu"] == gpu:
                out[-1]["end_ns"] = max(out[-1]["end_ns"], end)
                continue
            ports = [self._nic_port(gpu + k * self.ep_gpus) for k in range(groups)] if gpu >= 0 else []
            out.append({"hot_gpu": gpu, "port": ports[0] if ports else "", "ports": ports,
                        "start_ns": start, "end_ns": end})
        return out

    def _nic_port(self, gpu: int) -> str:
        """``switch:port`` of the leaf port facing ``gpu``'s NIC."""
        p = int(self.wiring.nic_pos[gpu])
        return f"{self.ports.switch_names[int(self.ports.switch_of[p])]}:{self.ports.port_names[p]}"

    def status(self) -> dict[str, Any]:
        return {
            "fabric": self.fabric.name,
            "description": self.fabric.description,
            "snmp_version": self.cfg.snmp_version,
            "routing": self.cfg.routing,
            "t0_ns": self.t0_ns,
            "now_ns": time.time_ns(),
            "ticks": self.ticks,
            # counter ticks the ticker laid after their time, each with its own span's traffic
            "late_ticks": self.late_ticks,
            "ports": len(self.ports),
            # the job's own progress: steps simulated, and time it stalled because the twin fell
            # behind real time (a starved CPU; 0 when it keeps up)
            "job_steps": self.timeline.traffic.step if self.t0_ns else 0,
            "job_stalled_s": round(self.timeline.stalled_ns / 1e9, 3) if self.t0_ns else 0.0,
            "switches": {
                sw.name: {
                    "address": sw.mgmt_address,
                    "port": sw.snmp.port,
                    "unreachable": self.agents[sw.name].unreachable if self.agents else False,
                    "boot_ns": self.agents[sw.name].boot_ns if self.agents else None,
                    "answered": self._protocols[sw.name].answered if sw.name in self._protocols else None,
                    "malformed": self._protocols[sw.name].malformed if sw.name in self._protocols else None,
                    "gnmi_port": self.gnmi_ports.get(sw.name),
                }
                for sw in self.fabric.switches
            },
            "report": self.reporter.status() if self.reporter is not None else None,
        }
