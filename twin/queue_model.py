r"""A fluid queue per egress port, advanced in closed form over constant-rate phases.

Why a queue model at all: MoE phases last milliseconds, counters are read every 0.1–10 s, so
utilization averages the phases away. What survives a poll is the congestion evidence this module
produces — watermark (max occupancy since last read), ECN-marked packets, PFC pause time and
frames, drops (reference/fabric_model.md §5, §7.1).

One *queue* is one (egress port, traffic class); the caller maps ports/classes to the flat queue
axis. Over a phase of length T the arrival rate λ and line rate C are constant, so the fluid
queue is piecewise linear and everything has an exact closed form (§5.2) — no sub-stepping::

    lossy class                         lossless class (PFC, Xoff/Xon hysteresis)
    q                                   q
    B ┤      ┌──────── drops r·(T−t_full)  Xoff ┤    /\    /\    /\      upstream paused on
      │     /                                  │   /  \  /  \  /  \     the falling edges:
    Kmax┤  /   ECN p = 1 above Kmax       Xon  ┤  /    \/    \/    \    pause = t_p per cycle
    Kmin┤ /    RED ramp Kmin..Kmax (Pmax)      │ /
      0 ┼/──────────────────── t               0 ┼/───────────────────── t

* Lossy: q(t) = clip(q0 + (λ−C)·t, 0, B); overflow is dropped.
* Lossless: when q reaches Xoff the switch pauses the upstream senders (arrival 0, drains at C)
  until q falls to Xon, then they resume at λ. With λ > C this is a sawtooth with cycle
  t_p + t_run, t_p = (Xoff−Xon)/C paused, t_run = (Xoff−Xon)/(λ−C) running; the paused fraction is
  1 − C/λ, i.e. the admitted rate is exactly C. Bytes held back stay at the sender (not admitted).
* ECN (RED on dequeue, HPCC's ``ShouldSendCN``): p(q) = 0 below Kmin, Pmax·(q−Kmin)/(Kmax−Kmin) up
  to Kmax, 1 above. Marked bytes = C·∫p(q(t))dt, integrated exactly per linear segment with the
  antiderivative of p (marking needs q > Kmin > 0, so departures run at C there).
* PFC frames: one XOFF frame per pause episode plus refreshes every ``pause_refresh_s`` while
  paused (fluid, so fractional; counters floor the running sum).

Conservation holds by construction: admitted = transmitted + Δqueued + dropped.
Everything is numpy over the queue axis; a phase for 4,096 queues costs about a millisecond.
A queue that is empty, not paused and offered at most line rate stays empty and passes its
arrivals through (admitted = transmitted = λ·T, nothing else) — most of a large fabric's queues
in most phases: :func:`advance` computes the closed forms above only for the others (the same
values, bit for bit, as the closed forms give the idle ones).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# NVIDIA RoCE lossless defaults (reference §1.6): ECN absolute min 150 KB, max 1500 KB. Pmax 0.2
# as in the HPCC DCQCN setup. Xoff ≈ α·free buffer with α = 1/8 of a ~16 MB share → 2 MB; the
# hysteresis (Xoff − Xon) is wider than HPCC's 3 KB so that pause-frame counts stay in the range
# real switches report (one XOFF per ~µs of congestion, not per 60 ns).
DEFAULT_KMIN_BYTES = 150e3
DEFAULT_KMAX_BYTES = 1.5e6
DEFAULT_PMAX = 0.2
DEFAULT_XOFF_BYTES = 2.0e6
DEFAULT_XON_OFFSET_BYTES = 64e3
DEFAULT_BUFFER_BYTES = 8.0e6  # dynamic-threshold cap of one port: α/(1+α) of a ~70 MB free pool
DEFAULT_PKT_BYTES = 4096.0  # RoCE MTU
DEFAULT_PAUSE_REFRESH_S = 42e-6  # half of 65535 quanta × 512 bit times at 400G


@dataclass(frozen=True)
class QueueConfig:
    """Per-queue line rate, buffer, ECN and PFC thresholds (arrays of length n, or broadcast)."""

    line_rate_bytes_ps: FloatArray
    buffer_bytes: FloatArray
    lossless: BoolArray
    kmin_bytes: FloatArray
    kmax_bytes: FloatArray
    pmax: float
    xoff_bytes: FloatArray
    xon_bytes: FloatArray
    pkt_bytes: float = DEFAULT_PKT_BYTES
    pause_refresh_s: float = DEFAULT_PAUSE_REFRESH_S

    def __post_init__(self) -> None:
        n = len(self.line_rate_bytes_ps)
        for name in ("buffer_bytes", "lossless", "kmin_bytes", "kmax_bytes", "xoff_bytes", "xon_bytes"):
            if np.shape(getattr(self, name)) != (n,):
                shape = np.shape(getattr(self, name))
                raise ValueError(f"QueueConfig.{name} has shape {shape}, expected ({n},)")
        if np.any(~(self.line_rate_bytes_ps > 0)):
            raise ValueError("QueueConfig.line_rate_bytes_ps must be > 0 for every queue")
        if np.any(self.kmax_bytes <= self.kmin_bytes) or np.any(self.kmin_bytes <= 0):
            raise ValueError("ECN thresholds need 0 < kmin_bytes < kmax_bytes")
        if np.any(self.xon_bytes >= self.xoff_bytes) or np.any(self.xon_bytes < 0):
            raise ValueError("PFC thresholds need 0 <= xon_bytes < xoff_bytes")
        if np.any(self.xoff_bytes > self.buffer_bytes):
            raise ValueError("PFC xoff_bytes must not exceed buffer_bytes")
        if not 0.0 < self.pmax <= 1.0:
            raise ValueError(f"pmax must be in (0, 1], got {self.pmax}")

    @cached_property
    def mean_ecn_p_pfc_cycle(self) -> FloatArray:
        """Mean marking probability over one Xon↔Xoff sawtooth (q linear both ways)."""
        hi = _ecn_antiderivative(self.xoff_bytes, self.kmin_bytes, self.kmax_bytes, self.pmax)
        lo = _ecn_antiderivative(self.xon_bytes, self.kmin_bytes, self.kmax_bytes, self.pmax)
        return (hi - lo) / (self.xoff_bytes - self.xon_bytes)

    @property
    def n(self) -> int:
        return len(self.line_rate_bytes_ps)

    def take(self, queues: npt.NDArray[np.intp] | slice) -> QueueConfig:
        """The same thresholds for a subset of the queues (indices or a slice)."""
        return QueueConfig(
            line_rate_bytes_ps=self.line_rate_bytes_ps[queues], buffer_bytes=self.buffer_bytes[queues],
            lossless=self.lossless[queues], kmin_bytes=self.kmin_bytes[queues],
            kmax_bytes=self.kmax_bytes[queues], pmax=self.pmax, xoff_bytes=self.xoff_bytes[queues],
            xon_bytes=self.xon_bytes[queues], pkt_bytes=self.pkt_bytes, pause_refresh_s=self.pause_refresh_s,
        )

    @classmethod
    def for_ports(
        cls,
        speed_bps: npt.ArrayLike,
        *,
        lossless: bool | npt.ArrayLike = True,
        buffer_bytes: float = DEFAULT_BUFFER_BYTES,
        kmin_bytes: float = DEFAULT_KMIN_BYTES,
        kmax_bytes: float = DEFAULT_KMAX_BYTES,
        pmax: float = DEFAULT_PMAX,
        xoff_bytes: float = DEFAULT_XOFF_BYTES,
        xon_offset_bytes: float = DEFAULT_XON_OFFSET_BYTES,
        pkt_bytes: float = DEFAULT_PKT_BYTES,
        pause_refresh_s: float = DEFAULT_PAUSE_REFRESH_S,
    ) -> QueueConfig:
        """One queue per port from line speeds in bit/s, thresholds shared by all ports."""
        c = np.asarray(speed_bps, dtype=np.float64) / 8.0
        n = len(c)
        full = np.full
        return cls(
            line_rate_bytes_ps=c,
            buffer_bytes=full(n, buffer_bytes),
            lossless=np.broadcast_to(np.asarray(lossless, dtype=np.bool_), (n,)).copy(),
            kmin_bytes=full(n, kmin_bytes),
            kmax_bytes=full(n, kmax_bytes),
            pmax=pmax,
            xoff_bytes=full(n, xoff_bytes),
            xon_bytes=full(n, xoff_bytes - xon_offset_bytes),
            pkt_bytes=pkt_bytes,
            pause_refresh_s=pause_refresh_s,
        )


@dataclass(frozen=True)
class PhaseResult:
    """What one constant-rate phase did to every queue (bytes, seconds, frames: per-phase deltas)."""

    admitted_bytes: FloatArray  # arrivals accepted into the queue (lossless: excludes paused time)
    tx_bytes: FloatArray
    dropped_bytes: FloatArray
    ecn_marked_bytes: FloatArray
    pause_s: FloatArray  # time the upstream senders were paused by this queue
    pause_frames: FloatArray
    peak_bytes: FloatArray  # max occupancy during the phase
    q_bytes: FloatArray  # occupancy at the end
    paused: BoolArray  # PFC state at the end


def ecn_probability(q: FloatArray, kmin: FloatArray, kmax: FloatArray, pmax: float) -> FloatArray:
    """RED marking probability p(q)."""
    ramp = pmax * (np.minimum(np.maximum(q, kmin), kmax) - kmin) / (kmax - kmin)
    return np.where(q > kmax, 1.0, ramp)


def _ecn_antiderivative(q: FloatArray, kmin: FloatArray, kmax: FloatArray, pmax: float) -> FloatArray:
    # P(q) = ∫₀^q p: 0 below Kmin, the ramp's parabola up to Kmax, then slope 1 (branch-free form)
    x = np.minimum(np.maximum(q, kmin), kmax) - kmin  # np.clip with array bounds is ~2x slower
    return (pmax / (2.0 * (kmax - kmin))) * x * x + np.maximum(q - kmax, 0.0)


def _mark_time(qa: FloatArray, qb: FloatArray, dur: FloatArray, cfg: QueueConfig) -> FloatArray:
    """∫p(q(t))dt over a linear segment qa → qb of length dur (exact)."""
    kmin, kmax, pmax = cfg.kmin_bytes, cfg.kmax_bytes, cfg.pmax
    dq = qb - qa
    flat = np.abs(dq) < 1e-6  # constant occupancy (µB): p(qa)·dur, no 0/0 or cancellation
    slope = _ecn_antiderivative(qb, kmin, kmax, pmax) - _ecn_antiderivative(qa, kmin, kmax, pmax)
    ramp = dur * slope / np.where(flat, 1.0, dq)
    if not flat.any():
        return ramp
    return np.where(flat, dur * ecn_probability(qa, kmin, kmax, pmax), ramp)


Parts = tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, BoolArray]


def _advance_lossy(cfg: QueueConfig, q0: FloatArray, lam: FloatArray, t: FloatArray) -> Parts:
    c, b = cfg.line_rate_bytes_ps, cfg.buffer_bytes
    r = lam - c
    with np.errstate(divide="ignore", invalid="ignore"):
        t_hit = np.where(r > 0, (b - q0) / r, np.where(r < 0, q0 / -r, np.inf))
    t_lin = np.minimum(t, np.maximum(t_hit, 0.0))
    q_end = np.minimum(np.maximum(q0 + r * t_lin, 0.0), b)
    dropped = np.where(r > 0, r * (t - t_lin), 0.0)
    mark_t = _mark_time(q0, q_end, t_lin, cfg) + (t - t_lin) * ecn_probability(
        q_end, cfg.kmin_bytes, cfg.kmax_bytes, cfg.pmax
    )
    zeros = np.zeros_like(q0)
    return lam * t, dropped, mark_t, zeros, zeros, np.maximum(q0, q_end), q_end, np.zeros(len(q0), np.bool_)


def _advance_lossless(
    cfg: QueueConfig, q0: FloatArray, paused0: BoolArray, lam: FloatArray, t: FloatArray
) -> Parts:
    c, xoff, xon = cfg.line_rate_bytes_ps, cfg.xoff_bytes, cfg.xon_bytes
    # 1. A queue that starts paused drains at C (arrival 0) until it reaches Xon.
    t_resume = np.maximum(q0 - xon, 0.0) / c
    still_paused = paused0 & (t < t_resume)
    t_pre = np.where(paused0, np.minimum(t, t_resume), 0.0)
    q1 = np.where(still_paused, q0 - c * t, np.where(paused0, np.minimum(q0, xon), q0))
    mark_t = _mark_time(q0, q1, t_pre, cfg)
    t1 = t - t_pre
    # 2. Unpaused from q1 for t1: rises to Xoff (if λ > C) and then cycles, or drains.
    excess = lam - c
    over = excess > 0
    h = xoff - xon
    t_p = h / c
    safe_excess = np.where(over, excess, 1.0)
    t_run = h / safe_excess
    cycle = t_p + t_run
    s = np.maximum(xoff - q1, 0.0) / safe_excess  # time to the first Xoff hit
    hit = over & (t1 > s)
    d = np.where(hit, t1 - s, 0.0)
    n_full = np.floor(d / cycle)
    u = d - n_full * cycle
    u_p = np.minimum(u, t_p)  # paused part of the last, partial cycle
    u_r = np.maximum(u - t_p, 0.0)  # running part of it
    q_cyc = np.where(u < t_p, xoff - c * u, xon + excess * u_r)
    # Not hitting Xoff: linear from q1 (rising below Xoff, or draining towards 0).
    t_empty = np.where(excess < 0, q1 / np.where(excess < 0, -excess, 1.0), np.inf)
    t_lin = np.minimum(t1, t_empty)
    q_lin = np.maximum(q1 + excess * t_lin, 0.0)
    # Non-hitting queues have s = inf; their branch is discarded below, silence the warnings.
    with np.errstate(invalid="ignore", over="ignore"):
        mark_hit = _mark_time(q1, xoff, np.where(hit, s, 0.0), cfg)
    avg_p_cycle = cfg.mean_ecn_p_pfc_cycle
    mark_hit = (
        mark_hit
        + n_full * cycle * avg_p_cycle
        + _mark_time(xoff, xoff - c * u_p, u_p, cfg)
        + _mark_time(xon, xon + excess * u_r, u_r, cfg)
    )
    mark_lin = _mark_time(q1, q_lin, t_lin, cfg)  # after t_empty q = 0: no marks
    mark_t = mark_t + np.where(hit, mark_hit, mark_lin)
    q_end = np.where(hit, q_cyc, q_lin)
    q_end = np.where(still_paused, q1, q_end)
    n_xoff = np.where(hit, n_full + 1.0, 0.0)
    pause_s = t_pre + np.where(hit, n_full * t_p + u_p, 0.0)
    paused_end = still_paused | (hit & (u < t_p))
    admitted = lam * (t - pause_s)
    peak = np.where(hit, xoff, np.maximum(q0, q_end))
    frames = n_xoff + pause_s / cfg.pause_refresh_s
    return admitted, np.zeros_like(q0), mark_t, pause_s, frames, peak, q_end, paused_end


def advance(
    cfg: QueueConfig,
    q0: FloatArray,
    paused0: BoolArray,
    arrival_bytes_ps: FloatArray,
    duration_s: float | FloatArray,
) -> PhaseResult:
    """Advance every queue over one phase of constant arrival rate (pure; exact fluid model)."""
    lam = np.maximum(np.asarray(arrival_bytes_ps, dtype=np.float64), 0.0)
    if lam.shape != (cfg.n,):
        raise ValueError(f"arrival_bytes_ps has shape {lam.shape}, expected ({cfg.n},)")
    t = np.broadcast_to(np.asarray(duration_s, dtype=np.float64), (cfg.n,))
    if np.any(t < 0):
        raise ValueError("duration_s must be >= 0")
    q0 = np.minimum(np.maximum(q0, 0.0), cfg.buffer_bytes)
    busy = np.flatnonzero((q0 > 0.0) | paused0 | (lam > cfg.line_rate_bytes_ps))
    if 4 * len(busy) >= cfg.n:  # mostly busy (a small fabric's hot phase): the closed forms for all
        return _advance_all(cfg, q0, paused0, lam, t)
    # idle queues pass their arrivals through; the busy ones get the closed forms
    admitted = lam * t
    zeros = np.zeros(cfg.n)
    res = PhaseResult(admitted_bytes=admitted, tx_bytes=admitted.copy(), dropped_bytes=zeros,
                      ecn_marked_bytes=zeros.copy(), pause_s=zeros.copy(), pause_frames=zeros.copy(),
                      peak_bytes=zeros.copy(), q_bytes=zeros.copy(), paused=np.zeros(cfg.n, dtype=np.bool_))
    if len(busy):
        sub = _advance_all(cfg.take(busy), q0[busy], paused0[busy], lam[busy], t[busy])
        for name in ("admitted_bytes", "tx_bytes", "dropped_bytes", "ecn_marked_bytes", "pause_s",
                     "pause_frames", "peak_bytes", "q_bytes", "paused"):
            getattr(res, name)[busy] = getattr(sub, name)
    return res


def _advance_all(
    cfg: QueueConfig, q0: FloatArray, paused0: BoolArray, lam: FloatArray, t: FloatArray
) -> PhaseResult:
    """The closed forms for every queue (``q0`` already within [0, buffer], ``lam`` ≥ 0)."""
    sel = cfg.lossless
    if sel.all():  # the usual RoCE fabric: skip the branch nobody uses
        parts = _advance_lossless(cfg, q0, paused0, lam, t)
    elif not sel.any():
        parts = _advance_lossy(cfg, q0, lam, t)
    else:
        lossy = _advance_lossy(cfg, q0, lam, t)
        lossless = _advance_lossless(cfg, q0, paused0, lam, t)
        parts = tuple(np.where(sel, b, a) for a, b in zip(lossy, lossless, strict=True))  # type: ignore[assignment]
    admitted, dropped, mark_t, pause_s, frames, peak, q_end, paused_end = parts
    tx = admitted - dropped - (q_end - q0)
    return PhaseResult(
        admitted_bytes=admitted,
        tx_bytes=tx,
        dropped_bytes=dropped,
        ecn_marked_bytes=cfg.line_rate_bytes_ps * mark_t,
        pause_s=pause_s,
        pause_frames=frames,
        peak_bytes=peak,
        q_bytes=q_end,
        paused=paused_end.astype(np.bool_),
    )


def _zeros(n: int) -> FloatArray:
    return np.zeros(n, dtype=np.float64)


@dataclass
class QueueBank:
    """Running state and cumulative counters of all queues (mutable: the twin steps it in place).

    Counters are float64 sums of fluid quantities; agents serve ``floor`` of them, so a reader
    always sees monotone integers. The watermark is the max occupancy since the last
    :meth:`read_watermark` (SONiC's periodic/user watermark: read-and-clear).
    """

    cfg: QueueConfig
    q_bytes: FloatArray = field(init=False)
    paused: BoolArray = field(init=False)
    watermark_bytes: FloatArray = field(init=False)
    admitted_bytes: FloatArray = field(init=False)
    tx_bytes: FloatArray = field(init=False)
    dropped_bytes: FloatArray = field(init=False)
    ecn_marked_bytes: FloatArray = field(init=False)
    pause_s: FloatArray = field(init=False)
    pause_frames: FloatArray = field(init=False)

    def __post_init__(self) -> None:
        n = self.cfg.n
        self.q_bytes = _zeros(n)
        self.paused = np.zeros(n, dtype=np.bool_)
        self.watermark_bytes = _zeros(n)
        self.admitted_bytes = _zeros(n)
        self.tx_bytes = _zeros(n)
        self.dropped_bytes = _zeros(n)
        self.ecn_marked_bytes = _zeros(n)
        self.pause_s = _zeros(n)
        self.pause_frames = _zeros(n)

    def step(self, arrival_bytes_ps: FloatArray, duration_s: float) -> PhaseResult:
        """Advance by one constant-rate phase and add its deltas to the counters."""
        res = advance(self.cfg, self.q_bytes, self.paused, arrival_bytes_ps, duration_s)
        self.q_bytes = res.q_bytes
        self.paused = res.paused
        np.maximum(self.watermark_bytes, res.peak_bytes, out=self.watermark_bytes)
        self.admitted_bytes += res.admitted_bytes
        self.tx_bytes += res.tx_bytes
        self.dropped_bytes += res.dropped_bytes
        self.ecn_marked_bytes += res.ecn_marked_bytes
        self.pause_s += res.pause_s
        self.pause_frames += res.pause_frames
        return res

    def read_watermark(self) -> FloatArray:
        """The max occupancy since the last read; the next period starts at the current occupancy."""
        wm = self.watermark_bytes.copy()
        self.watermark_bytes = self.q_bytes.copy()
        return wm

    def packets(self, octets: FloatArray) -> npt.NDArray[np.int64]:
        """Whole packets in a cumulative byte counter (what an agent serves as a *-pkts leaf)."""
        return np.floor(octets / self.cfg.pkt_bytes).astype(np.int64)


def spread_to_upstream(
    src_port: npt.NDArray[np.intp], dst_queue: npt.NDArray[np.intp], per_queue: FloatArray, n_ports: int
) -> FloatArray:
    """PFC pauses the ingress ports feeding a congested queue: each (src_port → dst_queue)
    incidence gives its source the queue's value; a port feeding several paused queues takes the
    max (their pauses overlap in time), so pause time never exceeds the phase."""
    out = _zeros(n_ports)
    np.maximum.at(out, src_port, per_queue[dst_queue])
    return out
