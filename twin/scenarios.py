r"""Offline, seeded twin scenarios with ground truth — for scoring detection on the twin's traffic.

The live twin runs in real time; scoring detection over 20 seeds × 10 minutes needs the same
models faster than that. This runner drives the twin's own pieces — the MoE job
(:mod:`twin.moe`: expert popularity, hot expert, regime shifts), its phase timeline
(:mod:`twin.schedule`), routing (:mod:`twin.routing`, PXN or plain ECMP) and the egress queue
model of :mod:`twin.fabric_queues` (the closed-form fluid queues of :mod:`twin.queue_model`,
with its burst → Xon pre-drain → tail decomposition of a phase and its switch-wide PFC
attribution) — and turns them into the per-window frames detection reads.

Time compression, said plainly: one window is one training *step* of the job (≈0.1–0.2 s of
simulated time), and every counter is divided by that step's duration, so a window reports the
per-second rates a 1 s poll of ~5 near-identical steps would report (popularity drifts with
ρ = 0.95 per step, so neighbouring steps are alike). Watermark = peak occupancy over the step.

Vectorized stepping: the queue state of all seeds of one scenario kind sits on one axis
(seeds × ports); each seed's phases have their own durations, which ``advance`` accepts per queue,
so one ``advance`` call steps every seed at once (a 192-port queue bank costs ~0.5 ms per call,
3,840 queues barely more).

    kind       job / routing                          truth
    static     PXN; from ``onset`` one hot expert     hot port = the hot GPU's leaf port, fixed
    moving     PXN; hot expert jumps every 2–4 steps  hot port per window, moved flag
    balanced   PXN; uniform popularity (σ = 0)        nothing (600 windows = 10 minutes)
    ecmp       ECMP without PXN; from ``onset`` 3     the uplink the elephants hash onto
               elephant GPU pairs hashed onto one uplink
    pfc        PXN, lossless; from ``onset`` a very   hot port; its leaf's ingress ports paused
               hot expert and a short step gap
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace

import numpy as np
import numpy.typing as npt

from fabricmon.core.detection.geometry import FabricGeometry, fabric_geometry
from fabricmon.core.topology.port_index import PortIndex, build_port_index
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.core.topology.spec import FabricSpec
from twin.fabric_queues import peer_positions
from twin.moe import LayerTraffic, MoeConfig, MoeTraffic
from twin.queue_model import QueueConfig, advance
from twin.routing import Router, RoutingMode, Wiring
from twin.scenario_scoring import KINDS, Scenario
from twin.schedule import JobTimeline, Phase

FloatArray = npt.NDArray[np.float64]
NS = 1_000_000_000
FAN_IN_SHARE = 0.005  # a sender counts towards a port's fan-in above this share of its bytes
PKT_BYTES = 4096.0


@dataclass(frozen=True)
class TwinFabric:
    """The small fabric every scenario runs on, with its wiring and detection geometry."""

    fabric: FabricSpec
    ports: PortIndex
    wiring: Wiring
    geo: FabricGeometry
    routers: dict[str, Router]

    @classmethod
    def build(cls, servers: int = 8, gpus: int = 8, spines: int = 4) -> TwinFabric:
        fabric = rail_optimized("twin-scn", servers=servers, gpus_per_server=gpus, spines=spines)
        ports = build_port_index(fabric)
        wiring = Wiring(fabric, ports)
        routers = {m: Router(wiring, m) for m in ("pxn", "ecmp")}
        return cls(fabric, ports, wiring, fabric_geometry(ports, fabric), routers)


_FABRICS: dict[tuple[int, int, int], TwinFabric] = {}


def twin_fabric(servers: int = 8, gpus: int = 8, spines: int = 4) -> TwinFabric:
    key = (servers, gpus, spines)
    if key not in _FABRICS:
        _FABRICS[key] = TwinFabric.build(servers, gpus, spines)
    return _FABRICS[key]


# Job knobs: two MoE layers per step keep a step short (fewer phases to step), FP8/BF16 bytes of
# the default job. Background skew σ = 0.3 as in the twin's default; balanced: σ = 0 (no skew).
BASE_JOB = MoeConfig(layers=2, regime_shift_prob=0.0, hot_boost=0.0)
HOT_BOOST = {"static": 1.5, "moving": 1.5, "pfc": 3.0}
HOT_RATIO = 3.0  # truth: the hot GPU received ≥ this × a GPU's mean dispatch bytes (nominal 4.5×)
SLOW_NIC_FACTOR = 0.25  # PFC storm: the hot GPU's NIC drains at a quarter of line rate


@dataclass(frozen=True)
class _LayerWithExtra(LayerTraffic):
    """A layer with a scenario's extra bytes (one group's (N, N)) added to its dispatch and their
    transpose to its combine."""

    extra: FloatArray = field(default_factory=lambda: np.zeros((0, 0)), repr=False)

    def blocks(self) -> tuple[FloatArray, FloatArray]:
        dispatch, combine = super().blocks()
        return dispatch + self.extra[None], combine + self.extra.T[None]

    def server_sums(self, per_server: int) -> tuple[FloatArray, FloatArray]:
        g = self.group_gpus
        dispatch, combine = self.blocks()
        return (dispatch.reshape(-1, per_server, g).sum(axis=1),
                np.ascontiguousarray(combine).reshape(-1, per_server, g).sum(axis=1))


class ScenarioTraffic(MoeTraffic):
    """The twin's MoE job with a scenario's script on top: the hot expert switched on at onset,
    forced jumps (a regime shift, as the popularity model makes them), and elephant pairs."""

    def __init__(self, cfg: MoeConfig, n_gpus: int, seed: int) -> None:
        super().__init__(cfg, n_gpus, seed)
        self.extra: FloatArray | None = None  # (N, N) bytes added to every dispatch
        self.last: list[LayerTraffic] = []

    def set_hot(self, expert: int, boost: float) -> None:
        pop = self.popularity
        pop.z = pop._stationary()  # a regime shift: popularity resampled, hot expert placed
        pop.hot_expert = int(expert)
        pop.cfg = replace(pop.cfg, hot_boost=boost)
        pop.regime += 1

    def next_step(self) -> list[LayerTraffic]:
        out = super().next_step()
        if self.extra is not None:
            out = [_LayerWithExtra(**{f.name: getattr(lt, f.name) for f in fields(lt)}, extra=self.extra)
                   for lt in out]
        self.last = out
        return out


@dataclass
class _Seed:
    """One seed's job, timeline and script."""

    seed: int
    traffic: ScenarioTraffic
    timeline: JobTimeline
    rng: np.random.Generator
    onset: int  # truth: first window of the event (static/moving: first truly hot window)
    script_onset: int  # when the script switches the event on
    hot_gpu: int = -1
    next_jump: int = -1
    moving_onset: int = -1
    truth_ports: tuple[int, ...] = ()
    seen_hot: bool = False
    last_hot: int = -1


def _per_seed_max(x: FloatArray, s: int) -> FloatArray:
    return x.reshape(s, -1).max(axis=1)


class _StackedQueues:
    """The fabric_queues model for S seeds at once: queue axis = seeds × ports."""

    def __init__(self, tf: TwinFabric, n_seeds: int, router: Router, *, lossy: bool) -> None:
        p = len(tf.ports)
        self.s, self.p, self.lossy = n_seeds, p, lossy
        speed = np.tile(tf.ports.speed_bps.astype(np.float64), n_seeds)
        # Only queues the routing can ever feed are stepped (PXN: host-facing ports only — a third
        # of the fabric); the others provably stay empty, so skipping them changes nothing.
        live = np.zeros(p, np.bool_)
        live[router.first_hop] = live[router.last_hop] = True
        if len(router.cross):
            live[tf.wiring.link[router.up, 1]] = live[tf.wiring.link[router.down, 3]] = True
        self.live = np.flatnonzero(np.tile(live, n_seeds))
        self.cfg = QueueConfig.for_ports(
            speed[self.live], lossless=not lossy, buffer_bytes=16e6, pkt_bytes=PKT_BYTES
        )
        self.cap = speed / 8.0
        self.q = np.zeros(len(self.live))
        self.paused = np.zeros(len(self.live), np.bool_)
        sw = np.asarray(tf.ports.switch_of)
        self.group_starts = np.flatnonzero(np.r_[True, sw[1:] != sw[:-1]])
        self.group_of = np.cumsum(np.r_[0, (sw[1:] != sw[:-1]).astype(np.int64)])
        peer = peer_positions(tf.wiring.link, p)
        self.rx_dst, self.rx_src = peer[peer >= 0], np.flatnonzero(peer >= 0)
        self.last_in_active = np.zeros(n_seeds * p, np.bool_)
        self.reset_window()

    def slow_receiver(self, seed_idx: int, port: int, factor: float) -> None:
        """The NIC behind ``port`` drains at ``factor`` × line rate from now on (PCIe/host
        back-pressure): the egress queue facing it can only send that fast."""
        rate = self.cfg.line_rate_bytes_ps.copy()
        rate[np.searchsorted(self.live, seed_idx * self.p + port)] *= factor
        self.cfg = replace(self.cfg, line_rate_bytes_ps=rate)

    def reset_window(self) -> None:
        n = self.s * self.p
        self.acc = {
            k: np.zeros(n) for k in ("tx", "drop", "ecn", "pfc_tx_s", "pfc_tx_fr", "pfc_rx_s", "pfc_rx_fr")
        }
        self.peak = np.zeros(n)
        self.peak[self.live] = self.q

    def push(self, dur_s: FloatArray, lam: FloatArray, in_active: npt.NDArray[np.bool_]) -> FloatArray:
        """Advance every queue; ``dur_s`` per seed. Returns the admitted bytes."""
        live = self.live
        if not lam.any() and not self.q.any() and not self.paused.any():
            return np.zeros(self.s * self.p)  # empty queues, nothing arriving: exactly nothing happens
        t = np.repeat(np.maximum(dur_s, 0.0), self.p)[live]
        res = advance(self.cfg, self.q, self.paused, lam[live], t)
        a = self.acc
        a["tx"][live] += res.tx_bytes
        a["drop"][live] += res.dropped_bytes
        a["ecn"][live] += res.ecn_marked_bytes
        if res.pause_s.any():
            # as FabricQueues: a switch's active ingress ports are paused as long as its
            # longest-paused queue; the peer switch port receives those frames
            s, p = self.s, self.p
            pause_s, pause_fr = np.zeros(s * p), np.zeros(s * p)
            pause_s[live], pause_fr[live] = res.pause_s, res.pause_frames
            sw_pause = np.maximum.reduceat(pause_s.reshape(s, p), self.group_starts, axis=1)[:, self.group_of]
            sw_fr = np.maximum.reduceat(pause_fr.reshape(s, p), self.group_starts, axis=1)[:, self.group_of]
            act = in_active.reshape(s, p)
            tx_s, tx_fr = np.where(act, sw_pause, 0.0), np.where(act, sw_fr, 0.0)
            rx_s, rx_fr = np.zeros((s, p)), np.zeros((s, p))
            rx_s[:, self.rx_dst], rx_fr[:, self.rx_dst] = tx_s[:, self.rx_src], tx_fr[:, self.rx_src]
            a["pfc_tx_s"] += tx_s.ravel()
            a["pfc_tx_fr"] += tx_fr.ravel()
            a["pfc_rx_s"] += rx_s.ravel()
            a["pfc_rx_fr"] += rx_fr.ravel()
        np.maximum(self.peak[live], res.peak_bytes, out=res.peak_bytes)
        self.peak[live] = res.peak_bytes
        self.q, self.paused = res.q_bytes, res.paused
        admitted = np.zeros(self.s * self.p)
        admitted[live] = res.admitted_bytes
        return admitted

    def phase(self, gap_s: FloatArray, phases: Sequence[Phase], host_facing: npt.NDArray[np.bool_]) -> None:
        """One phase per seed (same position in each seed's step), as FabricQueues._add_phase."""
        s, p = self.s, self.p
        zeros = np.zeros(s * p)
        self.push(gap_s, zeros, self.last_in_active)
        dur = np.array([(ph.end_ns - ph.start_ns) / NS for ph in phases])
        in_b = np.concatenate([ph.in_bytes for ph in phases])
        offered = np.concatenate([ph.out_bytes + ph.out_dropped for ph in phases])
        in_active = in_b > 0
        hf = np.tile(host_facing, s)
        t_send = _per_seed_max(np.where(hf, in_b / self.cap, 0.0), s)
        burst = np.minimum(dur, np.maximum(t_send, 1e-9))
        admitted = self.push(burst, offered / np.repeat(burst, p), in_active)
        rest = dur - burst
        held = zeros if self.lossy else np.maximum(offered - admitted, 0.0)
        if not self.lossy and self.paused.any():
            # a queue still paused at the burst's end drains to Xon first, nothing arriving
            pre = np.zeros(s * p)
            pre[self.live] = np.where(
                self.paused, np.maximum(self.q - self.cfg.xon_bytes, 0.0) / self.cfg.line_rate_bytes_ps, 0.0
            )
            pre_s = np.clip(_per_seed_max(pre, s), 0.0, np.maximum(rest - 1e-9, 0.0))
            self.push(pre_s, zeros, in_active)
            rest = rest - pre_s
        tail_lam = np.where(np.repeat(rest, p) > 0, held / np.repeat(np.maximum(rest, 1e-12), p), 0.0)
        self.push(rest, tail_lam, in_active)
        self.last_in_active = in_active


def _fan_in(router: Router, layers: Sequence[LayerTraffic], n_ports: int) -> FloatArray:
    """Per port: how many NIC pairs carry more than FAN_IN_SHARE of the port's egress bytes in
    this step (from the job's own matrices and the routing's incidence lists)."""
    w = router.wiring
    total = sum(lt.dispatch_bytes + lt.combine_bytes for lt in layers)
    # PXN folds a server's senders onto its proxy NIC: sources are per-host sums
    source = total if router.mode == "ecmp" else np.add.reduceat(total, np.asarray(w.host_start), axis=0)
    flat = source.ravel()[router.pair_source]
    port = [router.last_hop]
    weight = [flat]
    if len(router.cross):
        port += [w.link[router.up, 1], w.link[router.down, 3]]
        weight += [flat[router.cross], flat[router.cross]]
    ports, bytes_ = np.concatenate(port), np.concatenate(weight)
    port_total = np.bincount(ports, weights=bytes_, minlength=n_ports)
    big = bytes_ > FAN_IN_SHARE * port_total[ports]
    return np.bincount(ports, weights=big, minlength=n_ports).astype(np.float32)


def _elephants(router: Router, rng: np.random.Generator, n: int) -> tuple[FloatArray, int]:
    """Three cross-leaf GPU pairs of one leaf whose ECMP hash picks the same uplink: the collision."""
    w = router.wiring
    up = router.up
    src, dst = router.pairs[router.cross] // n, router.pairs[router.cross] % n
    cables, counts = np.unique(up, return_counts=True)
    cable = int(rng.choice(cables[counts >= 3]))
    pick = rng.choice(np.flatnonzero(up == cable), 3, replace=False)
    extra = np.zeros((n, n))
    # each elephant: ~250× a GPU pair's dispatch share, so its cable's background flows fall
    # below FAN_IN_SHARE (an elephant collision is few flows, not many senders)
    extra[src[pick], dst[pick]] = rng.uniform(0.8, 1.2, 3) * 1.0e9
    return extra, int(w.link[cable, 1])


def run_batch(kind: str, seeds: Sequence[int], *, windows: int | None = None) -> list[Scenario]:
    """Every seed of one scenario kind, stepped together; returns frames + truth per seed."""
    if kind not in KINDS:
        raise ValueError(f"unknown scenario kind {kind!r} (use one of {', '.join(KINDS)})")
    tf = twin_fabric()
    w_total = windows or {"balanced": 600, "moving": 60}.get(kind, 40)
    mode: RoutingMode = "ecmp" if kind == "ecmp" else "pxn"
    router = tf.routers[mode]
    job = replace(BASE_JOB, sigma=0.0) if kind == "balanced" else BASE_JOB
    if kind in ("pfc", "ecmp"):
        # a communication-bound job: phases fill most of the step, so the congested port's
        # time-averaged load and pause share are high (the live twin's default is compute-heavy)
        job = replace(job, step_gap_ms=5.0, attention_ms=1.0, expert_ms=1.0)
    ng, p, s = tf.wiring.n_gpus, len(tf.ports), len(seeds)
    runs: list[_Seed] = []
    for seed in seeds:
        rng = np.random.default_rng([seed, KINDS.index(kind), 7])
        traffic = ScenarioTraffic(job, ng, seed=int(rng.integers(1 << 31)))
        tl = JobTimeline(traffic, router, tf.ports.speed_bps, tf.ports.host_facing, 0, keep_s=0.5)
        onset = int(rng.integers(10, 20)) if kind != "balanced" else w_total
        runs.append(_Seed(seed, traffic, tl, rng, onset, onset))
    queues = _StackedQueues(tf, s, router, lossy=False)
    metrics = {
        k: np.zeros((s, w_total, p), np.float32)
        for k in (
            "util",
            "in_bps",
            "out_bps",
            "ecn_marked_ps",
            "pfc_pause_ps",
            "pfc_paused_fraction",
            "watermark_bytes",
            "drops_ps",
        )
    }
    fan = np.zeros((s, w_total, p), np.float32)
    truth: list[list[tuple[int, ...]]] = [[() for _ in range(w_total)] for _ in range(s)]
    moved = np.zeros((s, w_total), np.bool_)
    speed = tf.ports.speed_bps.astype(np.float64)
    for t in range(w_total):
        step_start = np.empty(s)
        phases: list[list[Phase]] = []
        in_bytes = np.zeros((s, p))
        for i, r in enumerate(runs):
            _script(kind, r, t, tf, router)
            if kind == "pfc" and t == r.script_onset:  # the hot GPU's NIC stops keeping up: a PFC storm
                queues.slow_receiver(i, int(tf.wiring.nic_pos[r.hot_gpu]), SLOW_NIC_FACTOR)
            start = r.timeline.cursor_ns
            step_start[i] = start
            r.timeline.ensure(start + 1)  # exactly one training step
            truth[i][t] = _truth(kind, r, tf, t, moved[i])
            phs = [ph for ph in r.timeline.phases if ph.start_ns >= start]
            phases.append(phs)
            in_bytes[i] = sum(ph.in_bytes for ph in phs)
            fan[i, t] = _fan_in(router, r.traffic.last, p)
        queues.reset_window()
        cursor = step_start.copy()
        for k in range(len(phases[0])):
            col = [phs[k] for phs in phases]
            gap = np.array([(ph.start_ns - c) / NS for ph, c in zip(col, cursor, strict=True)])
            queues.phase(gap, col, tf.ports.host_facing)
            cursor = np.array([ph.end_ns for ph in col], dtype=np.float64)
        step_end = np.array([r.timeline.cursor_ns for r in runs], dtype=np.float64)
        queues.push((step_end - cursor) / NS, np.zeros(s * p), queues.last_in_active)
        dur = ((step_end - step_start) / NS)[:, None]
        a = {k: v.reshape(s, p) for k, v in queues.acc.items()}
        out_bps = a["tx"] * 8.0 / dur
        in_bps = in_bytes * 8.0 / dur
        metrics["out_bps"][:, t] = out_bps
        metrics["in_bps"][:, t] = in_bps
        metrics["util"][:, t] = np.maximum(in_bps, out_bps) / speed
        metrics["ecn_marked_ps"][:, t] = a["ecn"] / PKT_BYTES / dur
        metrics["pfc_pause_ps"][:, t] = (a["pfc_tx_fr"] + a["pfc_rx_fr"]) / dur
        metrics["pfc_paused_fraction"][:, t] = np.minimum(np.maximum(a["pfc_tx_s"], a["pfc_rx_s"]) / dur, 1.0)
        metrics["watermark_bytes"][:, t] = queues.peak.reshape(s, p)
        metrics["drops_ps"][:, t] = a["drop"] / PKT_BYTES / dur
    out: list[Scenario] = []
    for i, r in enumerate(runs):
        out.append(
            Scenario(
                kind,
                r.seed,
                tf.geo,
                {k: v[i] for k, v in metrics.items()},
                fan[i],
                r.onset,
                r.moving_onset,
                truth[i],
                moved=tuple(bool(x) for x in moved[i]),
            )
        )
    return out


def _truth(kind: str, r: _Seed, tf: TwinFabric, t: int, moved: npt.NDArray[np.bool_]) -> tuple[int, ...]:
    """Ground truth of the step just generated, from the job's own traffic (never from detection).

    Incast kinds: the hot expert's GPU port is hot when that GPU received ≥ HOT_RATIO × the mean
    dispatch bytes of a GPU in this step — a freshly drawn regime can leave the "hot" expert
    barely above its peers (its latent is resampled too), and that is no incast. The first such
    window is the onset; a hot port different from the previous window's hot port is a move.
    """
    if kind in ("ecmp", "pfc"):
        return r.truth_ports if t >= r.onset else ()
    if r.hot_gpu < 0:
        return ()
    recv = sum(lt.dispatch_bytes.sum(axis=0) for lt in r.traffic.last)
    if recv[r.hot_gpu] < HOT_RATIO * recv.mean():
        r.last_hot = -1  # the incast paused: a hot port after the gap is a new incast, not a move
        return ()
    port = int(tf.wiring.nic_pos[r.hot_gpu])
    if not r.seen_hot:
        r.seen_hot, r.onset = True, t
    elif r.last_hot >= 0 and port != r.last_hot:
        moved[t] = True
        if r.moving_onset < 0:
            r.moving_onset = t
    r.last_hot = port
    return (port,)


def _script(kind: str, r: _Seed, t: int, tf: TwinFabric, router: Router) -> None:
    """What the scenario does to the job before window ``t``."""
    ng = tf.wiring.n_gpus
    if kind in ("static", "moving", "pfc") and t == r.script_onset:
        r.hot_gpu = int(r.rng.integers(ng))
        r.traffic.set_hot(r.hot_gpu * r.traffic.cfg.experts_per_gpu, HOT_BOOST[kind])
        r.next_jump = t + int(r.rng.integers(2, 5))
        r.truth_ports = (int(tf.wiring.nic_pos[r.hot_gpu]),)
    elif kind == "moving" and t == r.next_jump:
        # the hot expert jumps to another GPU (any leaf, any rail): a regime shift
        r.hot_gpu = int((r.hot_gpu + r.rng.integers(1, ng)) % ng)
        r.traffic.set_hot(r.hot_gpu * r.traffic.cfg.experts_per_gpu, HOT_BOOST[kind])
        r.next_jump = t + int(r.rng.integers(2, 5))
    elif kind == "ecmp" and t == r.script_onset:
        extra, uplink = _elephants(router, r.rng, ng)
        r.traffic.extra = extra
        r.truth_ports = (uplink,)


if __name__ == "__main__":
    # python -m twin.scenarios [seeds]: the issue-7 confusion table on the twin's scenarios
    import sys

    from twin.scenario_scoring import format_table, score

    print(format_table(score(int(sys.argv[1]) if len(sys.argv) > 1 else 20, batch=run_batch)))
