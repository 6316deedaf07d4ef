"""The job's timeline: MoE phases laid out in time, routed onto ports, and binned into port rates.

Each phase's port bytes move at a constant rate over the phase's active window. A port never
exceeds line rate:

* lossless (default, RoCE with PFC): the phase lasts until its bottleneck port has drained —
  ``T = max_p bytes_p / C_p`` — so the hot GPU's leaf port runs at line rate and the others below;
* lossy: senders push for ``T_send = max sender bytes / C``; an egress port that receives more than
  ``C·T_send + buffer`` drops the excess (ifOutDiscards) and the phase ends when the rest drained.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from twin.moe import MoeTraffic, PhaseKind
from twin.routing import FloatArray, PortBytes, Router


@dataclass(frozen=True)
class Phase:
    """One all-to-all of one MoE layer, placed in time, with its per-port bytes."""

    step: int
    layer: int
    kind: PhaseKind
    start_ns: int
    end_ns: int
    in_bytes: FloatArray  # (P,) bytes entering each port over the phase
    out_bytes: FloatArray  # (P,) bytes delivered out of each port
    out_dropped: FloatArray  # (P,) bytes dropped at each egress port (lossy mode)
    hot_gpu: int
    network_bytes: float

    def event(self) -> dict[str, object]:
        return {
            "step": self.step,
            "layer": self.layer,
            "phase": self.kind,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "hot_gpu": self.hot_gpu,
            "network_bytes": self.network_bytes,
        }


class JobTimeline:
    """Generates phases ahead of the clock and answers "bytes per port in [a, b)"."""

    def __init__(
        self,
        traffic: MoeTraffic,
        router: Router,
        speed_bps: FloatArray,
        host_facing: np.ndarray,
        t0_ns: int,
        *,
        lossy: bool = False,
        buffer_bytes: float = 16e6,
        keep_s: float = 10.0,
        keep_events: int = 20000,
        min_keep_s: float = 2.0,
        max_bytes: int = 64 << 20,
    ) -> None:
        self.traffic, self.router = traffic, router
        self.capacity_Bps = speed_bps / 8.0
        self.host_facing = host_facing
        self.lossy, self.buffer_bytes = lossy, buffer_bytes
        # phases are kept keep_s, or min_keep_s while they hold more than max_bytes (16,896
        # ports: 400 KB a phase, ~48 a second) — the queue model takes each within a tick
        self.keep_ns, self.min_keep_ns, self.max_bytes = int(keep_s * 1e9), int(min_keep_s * 1e9), max_bytes
        self._no_drops = np.zeros(len(speed_bps))  # every lossless phase's out_dropped (read-only)
        self._no_drops.flags.writeable = False
        self.cursor_ns = t0_ns
        # A live twin that cannot keep up (a starved CPU) would owe ever more simulation: past
        # max_lag_ns behind the time asked for, the job stalls instead (no traffic until then,
        # as a training job stalls on its input or a checkpoint), counted in stalled_ns.
        self.max_lag_ns: int | None = None
        self.stalled_ns = 0
        self.phases: deque[Phase] = deque()  # recent phases with their port arrays
        self.recent_events: deque[dict[str, object]] = deque(maxlen=keep_events)  # lighter, kept longer
        # the twin's ticker and its gNMI targets (another thread) both extend and read the deques
        self._lock = threading.RLock()
        # called with (phase, its (groups, G, G) EP-group byte blocks, twin/moe.py) as each phase
        # is placed — the timeline keeps port bytes only; a live job reporter
        # (twin/live_reporter.py) needs the blocks
        self.on_phase: Callable[[Phase, FloatArray], None] | None = None
        # which steps on_phase takes (a reporter samples steps): the others are routed from the
        # servers' sums without building their blocks
        self.wants_blocks: Callable[[int], bool] = lambda step: True

    def _place(self, step: int, layer: int, kind: PhaseKind, pb: PortBytes, hot_gpu: int, *,
               blocks: FloatArray | None) -> None:
        cap = self.capacity_Bps
        dropped = self._no_drops
        out = pb.out_bytes
        if self.lossy:
            send_s = float(np.max(pb.in_bytes[self.host_facing] / cap[self.host_facing], initial=0.0))
            dropped = np.clip(out - cap * send_s - self.buffer_bytes, 0.0, None)
            out = out - dropped
        dur_s = float(np.max(np.maximum(pb.in_bytes, out) / cap, initial=0.0))
        dur_ns = max(1, int(np.ceil(dur_s * 1e9)))
        start = self.cursor_ns
        self.cursor_ns += dur_ns
        ph = Phase(step, layer, kind, start, start + dur_ns, pb.in_bytes, out, dropped, hot_gpu,
                   float(pb.in_bytes[self.host_facing].sum()))
        self.phases.append(ph)
        self.recent_events.append(ph.event())
        if self.on_phase is not None and blocks is not None:
            self.on_phase(ph, blocks)

    def _generate_step(self) -> None:
        cfg = self.traffic.cfg
        ms = 1_000_000
        for lt in self.traffic.next_step():
            hot_gpu = self.traffic.gpu_of_expert(lt.hot_expert)
            per_server = self.router.server_gpus if lt.groups > 1 else 0
            if per_server and not (self.on_phase is not None and self.wants_blocks(lt.step)):
                # PXN on a multi-group job, nobody asking for the blocks: route the servers' sums
                d_src, c_src = lt.server_sums(per_server)
                pbs = self.router.route_sources(d_src), self.router.route_sources(c_src)
                blocks: tuple[FloatArray | None, FloatArray | None] = (None, None)
            else:
                dispatch, combine = lt.blocks()
                pbs, blocks = (self.router.route(dispatch), self.router.route(combine)), (dispatch, combine)
            self.cursor_ns += int(cfg.attention_ms * ms)
            self._place(lt.step, lt.layer, "dispatch", pbs[0], hot_gpu, blocks=blocks[0])
            self.cursor_ns += int(cfg.expert_ms * ms)
            self._place(lt.step, lt.layer, "combine", pbs[1], hot_gpu, blocks=blocks[1])
        self.cursor_ns += int(cfg.step_gap_ms * ms)

    def ensure(self, until_ns: int) -> None:
        """Generate steps until the timeline covers ``until_ns``; forget phases older than keep_s."""
        with self._lock:
            self._ensure(until_ns)

    def _ensure(self, until_ns: int) -> None:
        if self.max_lag_ns is not None and until_ns - self.cursor_ns > self.max_lag_ns:
            self.stalled_ns += until_ns - self.cursor_ns
            self.cursor_ns = until_ns
        while self.cursor_ns < until_ns:
            self._generate_step()
        phase_bytes = 3 * 8 * len(self.capacity_Bps)
        keep_ns = self.min_keep_ns if len(self.phases) * phase_bytes > self.max_bytes else self.keep_ns
        while self.phases and self.phases[0].end_ns < until_ns - keep_ns:
            self.phases.popleft()

    def window_bytes(self, a_ns: int, b_ns: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(in, out, dropped) bytes per port that fall in [a, b), pro rata over phase windows."""
        with self._lock:
            return self._window_bytes(a_ns, b_ns)

    def _window_bytes(self, a_ns: int, b_ns: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        self._ensure(b_ns)
        n = len(self.capacity_Bps)
        tot_in, tot_out, tot_drop = np.zeros(n), np.zeros(n), np.zeros(n)
        for ph in reversed(self.phases):  # newest first: stop at the first phase ended before a
            if ph.end_ns <= a_ns:
                break
            if ph.start_ns >= b_ns:
                continue
            frac = (min(b_ns, ph.end_ns) - max(a_ns, ph.start_ns)) / (ph.end_ns - ph.start_ns)
            tot_in += frac * ph.in_bytes
            tot_out += frac * ph.out_bytes
            tot_drop += frac * ph.out_dropped
        return tot_in, tot_out, tot_drop

    def events(self, t1_ns: int, t2_ns: int) -> list[dict[str, object]]:
        with self._lock:
            return [e for e in self.recent_events
                    if int(e["end_ns"]) > t1_ns and int(e["start_ns"]) < t2_ns]  # type: ignore[call-overload]

    def phases_from(self, start_ns: int, until_ns: int) -> list[Phase]:
        """Phases starting at or after ``start_ns`` and before ``until_ns`` (timeline extended to
        cover it), oldest first — for the queue model, which walks the timeline on its own."""
        with self._lock:
            self._ensure(until_ns)
            return [ph for ph in self.phases if start_ns <= ph.start_ns < until_ns]
