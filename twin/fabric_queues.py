r"""The twin's egress queues: one fluid queue per port, driven by the job's timeline.

The timeline (twin/schedule.py) stretches each phase so no port exceeds line rate on average —
fed as a constant rate, that would never build a queue. Here each phase becomes what the NICs
actually do: every sender pushes at line rate (the *burst*, ``T_send`` = the busiest sender's
bytes / C), so a receiver's egress that collects more than ``C·T_send`` is overloaded; the queue
rises, ECN marks, PFC pauses the upstream ports; then the *tail* drains what was held back until
the phase ends. Per phase and egress port the bytes are exactly the timeline's (the ones the
interface counters count)::

    arrival  λ                     phase [start ─────────────────────── end)
      out/T_send ┤█████████│                         lossless: tail carries the bytes PFC held
                 │         │▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒│   back (out − admitted) at a steady rate
               0 ┼─────────┴─────────────────────────┴── lossy: tail 0, overflow dropped
                  burst     tail                       gaps between phases: λ = 0

PFC: a paused queue pauses the switch's ingress ports that carried traffic in that phase (their
``pause-frames-tx``), and the peer switch port of each such ingress port receives the frames
(``pause-frames-rx``); a NIC peer is not modelled. Approximation, said plainly: "carried traffic
in the phase" stands for "fed the paused queue" — exact on PXN rail leaves (every ingress feeds
the hot port), coarse on spines.

State is kept per *segment* (constant λ): its start state and cumulative counters. Any instant's
counters are ``start + advance(start state, λ, t − t_start)`` — pure and deterministic, so the
gNMI target's reads and the ground truth (:meth:`FabricQueues.counters_at`,
:meth:`FabricQueues.peak_bytes`) are the same function, asked independently.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fabricmon.core.topology.port_index import PortIndex
from twin.queue_model import PhaseResult, QueueConfig, advance
from twin.schedule import JobTimeline, Phase

log = logging.getLogger(__name__)
FloatArray = npt.NDArray[np.float64]
NS = 1_000_000_000

# Rows of the cumulative array (per port).
CUM = (
    "admitted_bytes",
    "tx_bytes",
    "dropped_bytes",
    "ecn_marked_bytes",
    "queue_pause_s",  # time this egress queue held its upstream paused
    "pfc_tx_s",  # this port (as ingress) sent pause: its peer was paused this long
    "pfc_tx_frames",
    "pfc_rx_s",  # this port received pause from its peer switch
    "pfc_rx_frames",
)
_ROW = {k: i for i, k in enumerate(CUM)}


@dataclass(frozen=True)
class Segment:
    """Constant arrivals ``lam`` over [t0_ns, t1_ns), with the queue state and counters at t0."""

    t0_ns: int
    t1_ns: int
    lam: FloatArray  # bytes/s per egress queue
    in_active: npt.NDArray[np.bool_]  # ingress ports carrying traffic (PFC attribution)
    q0: FloatArray
    paused0: npt.NDArray[np.bool_]
    cum0: FloatArray  # (len(CUM), P) at t0
    peak: FloatArray  # max occupancy over the whole segment


class FabricQueues:
    """Egress queues of every port of the twin, stepped along the job timeline (thread-safe)."""

    def __init__(
        self,
        timeline: JobTimeline,
        ports: PortIndex,
        peer_pos: npt.NDArray[np.int64],
        t0_ns: int,
        *,
        lossy: bool = False,
        buffer_bytes: float = 16e6,
        pkt_bytes: float = 4096.0,
        keep_s: float = 6.0,
    ) -> None:
        self.timeline, self.ports = timeline, ports
        self.cfg = QueueConfig.for_ports(ports.speed_bps, lossless=not lossy, buffer_bytes=buffer_bytes,
                                         pkt_bytes=pkt_bytes)
        self.lossy = lossy
        self.cap_Bps = ports.speed_bps / 8.0
        self.n = len(ports)
        self.peer_pos = np.asarray(peer_pos, dtype=np.int64)
        has_peer = self.peer_pos >= 0
        self._rx_dst, self._rx_src = self.peer_pos[has_peer], np.flatnonzero(has_peer)
        sw = np.asarray(ports.switch_of)
        self._group_starts = np.flatnonzero(np.r_[True, sw[1:] != sw[:-1]]) if self.n else np.zeros(0, int)
        self._group_of = np.cumsum(np.r_[0, (sw[1:] != sw[:-1]).astype(np.int64)]) if self.n else sw
        self.keep_ns = int(keep_s * NS)
        self.segments: deque[Segment] = deque()
        self._starts: deque[int] = deque()
        self.cursor_ns = t0_ns
        self._q = np.zeros(self.n)
        self._paused = np.zeros(self.n, dtype=np.bool_)
        self._cum = np.zeros((len(CUM), self.n))
        self._last_in_active = np.zeros(self.n, dtype=np.bool_)
        self._next_phase_start = t0_ns  # phases starting before this are consumed
        self._lock = threading.RLock()

    # ---- building segments ----------------------------------------------------------------
    def _derive(self, res: PhaseResult, in_active: npt.NDArray[np.bool_]) -> FloatArray:
        """Per-port deltas (len(CUM), P) of one (partial) segment."""
        d = np.zeros((len(CUM), self.n))
        d[0], d[1], d[2], d[3], d[4] = (res.admitted_bytes, res.tx_bytes, res.dropped_bytes,
                                        res.ecn_marked_bytes, res.pause_s)
        if self.n and res.pause_s.any():
            # ingress ports of a switch are paused as long as its longest-paused queue (overlap)
            sw_pause = np.maximum.reduceat(res.pause_s, self._group_starts)[self._group_of]
            sw_frames = np.maximum.reduceat(res.pause_frames, self._group_starts)[self._group_of]
            d[5] = np.where(in_active, sw_pause, 0.0)
            d[6] = np.where(in_active, sw_frames, 0.0)
            d[7][self._rx_dst] = d[5][self._rx_src]
            d[8][self._rx_dst] = d[6][self._rx_src]
        return d

    def _push(self, t1_ns: int, lam: FloatArray, in_active: npt.NDArray[np.bool_]) -> PhaseResult:
        t0 = self.cursor_ns
        res = advance(self.cfg, self._q, self._paused, lam, (t1_ns - t0) / NS)
        self.segments.append(Segment(t0, t1_ns, lam, in_active, self._q, self._paused, self._cum.copy(),
                                     res.peak_bytes))
        self._starts.append(t0)
        self._cum = self._cum + self._derive(res, in_active)
        self._q, self._paused = res.q_bytes, res.paused
        self.cursor_ns = t1_ns
        return res

    def _add_phase(self, ph: Phase) -> None:
        if ph.start_ns > self.cursor_ns:  # compute between phases: nothing arrives, queues drain
            self._push(ph.start_ns, np.zeros(self.n), self._last_in_active)
        start = max(ph.start_ns, self.cursor_ns)
        if ph.end_ns <= start:
            return
        hf = self.ports.host_facing
        t_send = float(np.max(ph.in_bytes[hf] / self.cap_Bps[hf], initial=0.0))
        dur_ns = ph.end_ns - start
        burst_ns = min(dur_ns, max(1, round(t_send * NS)))
        in_active = ph.in_bytes > 0
        offered = ph.out_bytes + ph.out_dropped
        burst = self._push(start + burst_ns, offered / (burst_ns / NS), in_active)
        if burst_ns < dur_ns:
            held = np.zeros(self.n) if self.lossy else np.maximum(offered - burst.admitted_bytes, 0.0)
            tail_start = start + burst_ns
            if not self.lossy and self._paused.any():
                # A queue still paused at the burst's end first drains to Xon with nothing
                # arriving; the held bytes then come over what is left of the phase (so none is
                # lost: for the bottleneck port that is exactly line rate minus the Xon backlog).
                xon, c = self.cfg.xon_bytes, self.cfg.line_rate_bytes_ps
                pre_s = np.where(self._paused, np.maximum(self._q - xon, 0.0) / c, 0.0)
                pre_ns = min(dur_ns - burst_ns - 1, int(np.ceil(pre_s.max() * NS)))
                if pre_ns > 0:
                    self._push(tail_start + pre_ns, np.zeros(self.n), in_active)
                    tail_start += pre_ns
            self._push(ph.end_ns, held / ((ph.end_ns - tail_start) / NS), in_active)
        self._last_in_active = in_active

    def advance_to(self, t_ns: int) -> None:
        """Build segments until ``t_ns`` is covered; forget those older than ``keep_s``."""
        with self._lock:
            if self.cursor_ns > t_ns:
                return
            for ph in self.timeline.phases_from(self._next_phase_start, t_ns):
                if ph.start_ns < self._next_phase_start:
                    continue
                self._add_phase(ph)
                self._next_phase_start = ph.start_ns + 1
                if self.cursor_ns > t_ns:
                    break
            if self.cursor_ns <= t_ns:  # no phase known up to t (end of job or pruned): idle
                self._push(t_ns + 1, np.zeros(self.n), self._last_in_active)
            while len(self.segments) > 2 and self.segments[1].t1_ns < t_ns - self.keep_ns:
                self.segments.popleft()
                self._starts.popleft()

    # ---- reading --------------------------------------------------------------------------
    @property
    def oldest_ns(self) -> int:
        """The oldest instant still answerable (``keep_s`` of history is kept)."""
        with self._lock:
            return self._starts[0] if self._starts else self.cursor_ns

    def _segment(self, t_ns: int) -> Segment:
        self.advance_to(t_ns)
        k = bisect.bisect_right(self._starts, t_ns) - 1
        if k < 0:
            raise ValueError(f"t_ns={t_ns} is before the kept queue history (oldest {self._starts[0]})")
        return self.segments[k]

    def _partial(self, seg: Segment, t_ns: int) -> tuple[PhaseResult, FloatArray]:
        res = advance(self.cfg, seg.q0, seg.paused0, seg.lam, (t_ns - seg.t0_ns) / NS)
        return res, seg.cum0 + self._derive(res, seg.in_active)

    def counters_at(self, t_ns: int) -> dict[str, FloatArray]:
        """Cumulative fluid counters (float) per port at ``t_ns``, plus the occupancy ``q_bytes``."""
        with self._lock:
            seg = self._segment(t_ns)
            res, cum = self._partial(seg, t_ns)
        out = {k: cum[i] for i, k in enumerate(CUM)}
        out["q_bytes"] = res.q_bytes
        return out

    def peak_bytes(self, a_ns: int, b_ns: int) -> FloatArray:
        """Max occupancy per port over [a, b] (what a read-and-clear watermark at b reports when
        the previous clear was at a)."""
        if b_ns < a_ns:
            raise ValueError(f"empty interval [{a_ns}, {b_ns}]")
        with self._lock:
            self.advance_to(b_ns)
            first = self._segment(a_ns)
            res_a, _ = self._partial(first, a_ns)
            if b_ns < first.t1_ns:  # both ends in one segment: from the state at a, for b − a
                res = advance(self.cfg, res_a.q_bytes, res_a.paused, first.lam, (b_ns - a_ns) / NS)
                return np.maximum(res.peak_bytes, res_a.q_bytes)
            rest = advance(self.cfg, res_a.q_bytes, res_a.paused, first.lam, (first.t1_ns - a_ns) / NS)
            peak = np.maximum(rest.peak_bytes, res_a.q_bytes)
            k0 = bisect.bisect_right(self._starts, a_ns)
            k1 = bisect.bisect_right(self._starts, b_ns) - 1
            for k in range(k0, k1):  # whole segments inside (a, b)
                np.maximum(peak, self.segments[k].peak, out=peak)
            if k1 >= k0:
                last = self.segments[k1]
                res_b, _ = self._partial(last, b_ns)
                np.maximum(peak, np.maximum(res_b.peak_bytes, last.q0), out=peak)
            return peak


def peer_positions(link: npt.NDArray[np.int64], n_ports: int) -> npt.NDArray[np.int64]:
    """Port position → the position of the switch port at the other end of its cable (−1: none).
    ``link`` rows are (leaf, leaf port, spine, spine port) as in twin.routing.Wiring."""
    peer = np.full(n_ports, -1, dtype=np.int64)
    if len(link):
        peer[link[:, 1]] = link[:, 3]
        peer[link[:, 3]] = link[:, 1]
    return peer
