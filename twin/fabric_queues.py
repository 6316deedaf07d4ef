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

State is kept per *segment* (constant λ): its start state. Any instant's counters are
``start + advance(start state, λ, t − t_start)`` — pure and deterministic, so the gNMI target's
reads and the ground truth (:meth:`FabricQueues.counters_at`, :meth:`FabricQueues.peak_bytes`)
are the same function, asked independently. Bounded for a large fabric (16,896 ports, ~150
segments a second), bit for bit what keeping every segment's whole state would give:

* the cumulative counters are kept at each phase's first segment only (a *checkpoint*); a read
  inside the phase adds the earlier segments' deltas again, for the ports it asks about;
* a read asks about one switch's ports (``ports=``, a gNMI target's slice): the closed forms run
  for those, plus the queues that can pause in the segment (their switch's PFC reaches the slice
  through its peers' cables) — never for the whole fabric per read;
* occupancy, pause state, peaks and mostly-zero arrivals are kept as their nonzero entries
  (:class:`Sparse`: a few % of a fabric's queues hold bytes at any time);
* history is ``keep_s`` (6 s), cut to ``min_keep_s`` (2 s) while it holds more than ``max_bytes``.
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


IntArray = npt.NDArray[np.intp]


@dataclass(frozen=True)
class Sparse:
    """A mostly-zero per-port array kept as its nonzero entries (sorted positions)."""

    idx: IntArray
    vals: npt.NDArray[np.float64] | npt.NDArray[np.bool_]
    n: int

    def take(self, sl: slice) -> np.ndarray:
        """The dense values of ports ``sl`` (a fresh array)."""
        out = np.zeros(sl.stop - sl.start, dtype=self.vals.dtype)
        a, b = self.idx.searchsorted((sl.start, sl.stop))
        out[self.idx[a:b] - sl.start] = self.vals[a:b]
        return out

    def at(self, ports: IntArray) -> np.ndarray:
        """The values of the listed ports."""
        out = np.zeros(len(ports), dtype=self.vals.dtype)
        if len(self.idx):
            k = np.minimum(self.idx.searchsorted(ports), len(self.idx) - 1)
            hit = self.idx[k] == ports
            out[hit] = self.vals[k[hit]]
        return out

    @property
    def nbytes(self) -> int:
        return int(self.idx.nbytes + self.vals.nbytes)


Kept = np.ndarray | Sparse


def keep(a: np.ndarray) -> Kept:
    """``a`` as kept in the history: its nonzero entries when they are under a quarter of it."""
    nz = np.flatnonzero(a)
    return Sparse(nz, a[nz], len(a)) if 4 * len(nz) < len(a) else a


def take(k: Kept, sl: slice) -> np.ndarray:
    return k.take(sl) if isinstance(k, Sparse) else k[sl]


def take_at(k: Kept, ports: IntArray) -> np.ndarray:
    return k.at(ports) if isinstance(k, Sparse) else k[ports]


@dataclass(frozen=True)
class Segment:
    """Constant arrivals ``lam`` over [t0_ns, t1_ns), with the queue state at t0 and, at a phase's
    first segment, the cumulative counters at t0 (``cum0``; None elsewhere)."""

    t0_ns: int
    t1_ns: int
    lam: Kept  # bytes/s per egress queue
    in_active: npt.NDArray[np.bool_]  # ingress ports carrying traffic (PFC attribution; one per phase)
    q0: Kept
    paused0: Kept
    peak: Kept  # max occupancy over the whole segment
    pausers: IntArray  # queues that can pause in it: paused at t0, or offered more than line rate
    pfc: tuple[FloatArray, FloatArray] | None  # (pause s, frames) per switch over the whole segment
    cum0: FloatArray | None  # (len(CUM), P) at t0, or None: replay from the phase's checkpoint

    @property
    def nbytes(self) -> int:
        kept = (self.lam, self.q0, self.paused0, self.peak)
        return (sum(k.nbytes for k in kept) + self.pausers.nbytes
                + (2 * self.pfc[0].nbytes if self.pfc is not None else 0)
                + (self.cum0.nbytes if self.cum0 is not None else 0))


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
        min_keep_s: float = 2.0,
        max_bytes: int = 128 << 20,
    ) -> None:
        self.timeline, self.ports = timeline, ports
        self.cfg = QueueConfig.for_ports(ports.speed_bps, lossless=not lossy, buffer_bytes=buffer_bytes,
                                         pkt_bytes=pkt_bytes)
        self.lossy = lossy
        self.cap_Bps = ports.speed_bps / 8.0
        self.n = len(ports)
        self.peer_pos = np.asarray(peer_pos, dtype=np.int64)
        sw = np.asarray(ports.switch_of)
        self._switch_id = np.cumsum(np.r_[0, (sw[1:] != sw[:-1]).astype(np.int64)]) if self.n else sw
        self._switches = int(self._switch_id[-1]) + 1 if self.n else 0
        self._all = slice(0, self.n)
        self._cfg_of: dict[tuple[int, int], QueueConfig] = {(0, self.n): self.cfg}
        self.keep_ns, self.min_keep_ns, self.max_bytes = int(keep_s * NS), int(min_keep_s * NS), max_bytes
        self.segments: deque[Segment] = deque()
        self._starts: deque[int] = deque()
        self._bytes = 0  # what the kept segments hold
        self.cursor_ns = t0_ns
        self._q = np.zeros(self.n)
        self._paused = np.zeros(self.n, dtype=np.bool_)
        self._cum = np.zeros((len(CUM), self.n))  # at the cursor, added to in place
        self._last_in_active = np.zeros(self.n, dtype=np.bool_)
        self._next_phase_start = t0_ns  # phases starting before this are consumed
        self._lock = threading.RLock()

    # ---- one segment's deltas, for any set of ports -----------------------------------------
    def _cfg_for(self, sl: slice) -> QueueConfig:
        key = (sl.start, sl.stop)
        if key not in self._cfg_of:
            self._cfg_of[key] = self.cfg.take(sl)
        return self._cfg_of[key]

    def _switch_pause(self, pausers: IntArray, q0: np.ndarray, paused0: np.ndarray, lam: np.ndarray,
                      dt_s: float) -> tuple[FloatArray, FloatArray] | None:
        """(pause s, frames) per switch over the first ``dt_s`` of a segment: as long as its
        longest-paused queue (they overlap); None when nothing paused."""
        if not len(pausers):
            return None
        res = advance(self.cfg.take(pausers), q0, paused0, lam, dt_s)
        if not res.pause_s.any():
            return None
        sw_pause, sw_frames = np.zeros(self._switches), np.zeros(self._switches)
        np.maximum.at(sw_pause, self._switch_id[pausers], res.pause_s)
        np.maximum.at(sw_frames, self._switch_id[pausers], res.pause_frames)
        return sw_pause, sw_frames

    def _add_deltas(self, cum: FloatArray, res: PhaseResult, pfc: tuple[FloatArray, FloatArray] | None,
                    in_active: npt.NDArray[np.bool_], sl: slice) -> None:
        """cum (len(CUM), ports of sl) += one (partial) segment's deltas. PFC: a paused switch's
        ingress ports that carried traffic send pause (its longest pause), their peer switch
        ports receive it."""
        cum[0] += res.admitted_bytes
        cum[1] += res.tx_bytes
        cum[2] += res.dropped_bytes
        cum[3] += res.ecn_marked_bytes
        cum[4] += res.pause_s
        if pfc is None:
            return
        sw_pause, sw_frames = pfc
        act, own = in_active[sl], self._switch_id[sl]
        cum[5] += np.where(act, sw_pause[own], 0.0)
        cum[6] += np.where(act, sw_frames[own], 0.0)
        peer = self.peer_pos[sl]
        has = np.flatnonzero(peer >= 0)
        far = peer[has]
        cum[7, has] += np.where(in_active[far], sw_pause[self._switch_id[far]], 0.0)
        cum[8, has] += np.where(in_active[far], sw_frames[self._switch_id[far]], 0.0)

    def _replay(self, seg: Segment, dt_s: float, sl: slice, cum: FloatArray | None) -> PhaseResult:
        """Advance ports ``sl`` over the first ``dt_s`` of ``seg`` (adding the deltas to ``cum``)."""
        lam = take(seg.lam, sl)
        res = advance(self._cfg_for(sl), take(seg.q0, sl), take(seg.paused0, sl), lam, dt_s)
        if cum is not None:
            if dt_s == (seg.t1_ns - seg.t0_ns) / NS:  # the whole segment: its switches' PFC is kept
                pfc = seg.pfc
            else:
                p = seg.pausers
                pfc = self._switch_pause(p, take_at(seg.q0, p), take_at(seg.paused0, p), take_at(seg.lam, p),
                                         dt_s)
            self._add_deltas(cum, res, pfc, seg.in_active, sl)
        return res

    # ---- building segments ----------------------------------------------------------------
    def _push(self, t1_ns: int, lam: FloatArray, in_active: npt.NDArray[np.bool_], *,
              checkpoint: bool) -> PhaseResult:
        t0 = self.cursor_ns
        dt_s = (t1_ns - t0) / NS
        res = advance(self.cfg, self._q, self._paused, lam, dt_s)
        pausers = np.flatnonzero(self._paused | (np.maximum(lam, 0.0) > self.cfg.line_rate_bytes_ps))
        pfc = self._switch_pause(pausers, self._q[pausers], self._paused[pausers], lam[pausers], dt_s)
        seg = Segment(t0, t1_ns, keep(lam), in_active, keep(self._q), keep(self._paused),
                      keep(res.peak_bytes), pausers, pfc, self._cum.copy() if checkpoint else None)
        self.segments.append(seg)
        self._starts.append(t0)
        self._bytes += seg.nbytes
        self._add_deltas(self._cum, res, pfc, in_active, self._all)
        self._q, self._paused = res.q_bytes, res.paused
        self.cursor_ns = t1_ns
        return res

    def _add_phase(self, ph: Phase) -> None:
        first = True  # the phase's first segment keeps the counters (a checkpoint)
        if ph.start_ns > self.cursor_ns:  # compute between phases: nothing arrives, queues drain
            self._push(ph.start_ns, np.zeros(self.n), self._last_in_active, checkpoint=True)
            first = False
        start = max(ph.start_ns, self.cursor_ns)
        if ph.end_ns <= start:
            return
        hf = self.ports.host_facing
        t_send = float(np.max(ph.in_bytes[hf] / self.cap_Bps[hf], initial=0.0))
        dur_ns = ph.end_ns - start
        burst_ns = min(dur_ns, max(1, round(t_send * NS)))
        in_active = ph.in_bytes > 0
        offered = ph.out_bytes + ph.out_dropped
        burst = self._push(start + burst_ns, offered / (burst_ns / NS), in_active, checkpoint=first)
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
                    self._push(tail_start + pre_ns, np.zeros(self.n), in_active, checkpoint=False)
                    tail_start += pre_ns
            self._push(ph.end_ns, held / ((ph.end_ns - tail_start) / NS), in_active, checkpoint=False)
        self._last_in_active = in_active

    def advance_to(self, t_ns: int) -> None:
        """Build segments until ``t_ns`` is covered; forget what is older than the history kept."""
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
                self._push(t_ns + 1, np.zeros(self.n), self._last_in_active, checkpoint=True)
            self._prune(t_ns)

    def _prune(self, t_ns: int) -> None:
        """Drop the oldest phase (its checkpoint and the segments up to the next one) while the
        next one starts before the horizon: ``keep_s`` back, or ``min_keep_s`` back while the
        history holds more than ``max_bytes``."""
        segs = self.segments
        while True:
            nxt = next((j for j in range(1, min(len(segs), 8)) if segs[j].cum0 is not None), None)
            if nxt is None or nxt >= len(segs) - 1:
                return
            horizon = t_ns - (self.min_keep_ns if self._bytes > self.max_bytes else self.keep_ns)
            if segs[nxt].t0_ns > horizon:
                return
            for _ in range(nxt):
                self._bytes -= segs.popleft().nbytes
                self._starts.popleft()

    # ---- reading --------------------------------------------------------------------------
    @property
    def oldest_ns(self) -> int:
        """The oldest instant still answerable (``keep_s`` of history is kept)."""
        with self._lock:
            return self._starts[0] if self._starts else self.cursor_ns

    @property
    def history_bytes(self) -> int:
        """What the kept segments hold (bounded by ``max_bytes`` past ``min_keep_s``)."""
        return self._bytes

    def _index(self, t_ns: int) -> int:
        self.advance_to(t_ns)
        k = bisect.bisect_right(self._starts, t_ns) - 1
        if k < 0:
            raise ValueError(f"t_ns={t_ns} is before the kept queue history (oldest {self._starts[0]})")
        return k

    def _state(self, k: int, t_ns: int, sl: slice) -> tuple[PhaseResult, FloatArray]:
        """Ports ``sl`` at ``t_ns`` inside segment k: the queues and the cumulative counters, from
        the phase's checkpoint plus each segment's deltas since (the order they were added in)."""
        j = k
        while self.segments[j].cum0 is None:
            j -= 1
        first = self.segments[j]
        assert first.cum0 is not None
        cum = first.cum0[:, sl].copy()
        for i in range(j, k):
            seg = self.segments[i]
            self._replay(seg, (seg.t1_ns - seg.t0_ns) / NS, sl, cum)
        seg = self.segments[k]
        return self._replay(seg, (t_ns - seg.t0_ns) / NS, sl, cum), cum

    def counters_at(
        self, t_ns: int, ports: slice | None = None, *, or_oldest: bool = False
    ) -> dict[str, FloatArray]:
        """Cumulative fluid counters (float) per port at ``t_ns``, plus the occupancy ``q_bytes``:
        of every port, or of the ports ``ports`` (one switch's slice; arrays of its length).
        ``or_oldest``: an instant pruned meanwhile answers for the oldest kept one (a live read
        that checked ``oldest_ns`` before another thread's advance pruned past it), not an error."""
        sl = ports if ports is not None else self._all
        with self._lock:
            t_ns = self._at_least_oldest(t_ns) if or_oldest else t_ns
            res, cum = self._state(self._index(t_ns), t_ns, sl)
        out = {k: cum[i] for i, k in enumerate(CUM)}
        out["q_bytes"] = res.q_bytes
        return out

    def _at_least_oldest(self, t_ns: int) -> int:
        self.advance_to(t_ns)  # (what prunes: the oldest kept instant is known after it)
        return max(t_ns, self._starts[0]) if self._starts else t_ns

    def peak_bytes(
        self, a_ns: int, b_ns: int, ports: slice | None = None, *, or_oldest: bool = False
    ) -> FloatArray:
        """Max occupancy per port over [a, b] (what a read-and-clear watermark at b reports when
        the previous clear was at a): of every port, or of the ports ``ports``."""
        if b_ns < a_ns:
            raise ValueError(f"empty interval [{a_ns}, {b_ns}]")
        sl = ports if ports is not None else self._all
        with self._lock:
            self.advance_to(b_ns)
            if or_oldest:  # (as counters_at's)
                a_ns = self._at_least_oldest(a_ns)
                b_ns = max(a_ns, b_ns)
            k0 = self._index(a_ns)
            first = self.segments[k0]
            cfg, lam = self._cfg_for(sl), take(first.lam, sl)
            res_a = self._replay(first, (a_ns - first.t0_ns) / NS, sl, None)
            if b_ns < first.t1_ns:  # both ends in one segment: from the state at a, for b − a
                res = advance(cfg, res_a.q_bytes, res_a.paused, lam, (b_ns - a_ns) / NS)
                return np.maximum(res.peak_bytes, res_a.q_bytes)
            rest = advance(cfg, res_a.q_bytes, res_a.paused, lam, (first.t1_ns - a_ns) / NS)
            peak = np.maximum(rest.peak_bytes, res_a.q_bytes)
            k1 = bisect.bisect_right(self._starts, b_ns) - 1
            for k in range(k0 + 1, k1):  # whole segments inside (a, b)
                whole = self.segments[k].peak
                if isinstance(whole, Sparse):
                    lo, hi = whole.idx.searchsorted((sl.start, sl.stop))
                    if hi > lo:
                        at = whole.idx[lo:hi] - sl.start
                        peak[at] = np.maximum(peak[at], whole.vals[lo:hi])
                else:
                    np.maximum(peak, whole[sl], out=peak)
            if k1 > k0:
                last = self.segments[k1]
                res_b = self._replay(last, (b_ns - last.t0_ns) / NS, sl, None)
                np.maximum(peak, np.maximum(res_b.peak_bytes, take(last.q0, sl)), out=peak)
            return peak


def peer_positions(link: npt.NDArray[np.int64], n_ports: int) -> npt.NDArray[np.int64]:
    """Port position → the position of the switch port at the other end of its cable (−1: none).
    ``link`` rows are (leaf, leaf port, spine, spine port) as in twin.routing.Wiring."""
    peer = np.full(n_ports, -1, dtype=np.int64)
    if len(link):
        peer[link[:, 1]] = link[:, 3]
        peer[link[:, 3]] = link[:, 1]
    return peer
