"""Seeded scenarios with ground truth for scoring detection — until the twin replaces them.

Each scenario is a rail-optimized fabric (``railgen``) observed for W one-second windows: per-port
metric arrays shaped (W, n_ports), the per-port fan-in the run's traffic matrix would give, and
per-window truth. Background traffic is a balanced PXN all-to-all: every rail-leaf host port
receives from the 31 other servers (fan-in 31) at similar load, uplinks idle, and random
microbursts raise watermarks/ECN on ~1 % of ports per window *without* raising load — the
realistic trap for a detector that looks at queues alone.

    kind        what happens from ``onset``
    static      1–2 host ports at 2.5–4× peer load, fan-in 8–31, WM ≫ Kmax, ECN — they stay
    moving      same, but the hot set jumps to other ports (any leaf/rail) every 1–4 windows
    balanced    nothing (600 windows = 10 minutes)
    ecmp        uplinks carry traffic; 1–3 uplinks of 1–2 leaves get 2–3 colliding elephants
    pfc         a NIC pauses its leaf port (paused ~95 %), pauses spread to that leaf's uplinks
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fabricmon.core.detect import (
    DetectConfig,
    FabricGeometry,
    MovingState,
    conditions,
    detect_window,
    fabric_geometry,
)
from fabricmon.core.incast_lifecycle import DEFAULT_LIFECYCLE, LifecycleConfig, Slot, advance
from fabricmon.core.railgen import rail_optimized
from fabricmon.core.topology import build_port_index

KINDS = ("static", "moving", "balanced", "ecmp", "pfc")
# The alert kind each scenario is expected to raise (balanced: none at all).
EXPECTED_ALERT = {
    "static": "incast",
    "moving": "moving_incast",
    "balanced": None,
    "ecmp": "ecmp_imbalance",
    "pfc": "pfc_storm",
}
KMAX = DetectConfig().watermark_kmax_bytes
NS = 1_000_000_000


@dataclass(frozen=True)
class Scenario:
    """Frames of one seeded run plus its ground truth."""

    kind: str
    seed: int
    geo: FabricGeometry
    metrics: Mapping[str, npt.NDArray[np.float32]]  # each (W, n_ports)
    fan_in: npt.NDArray[np.float32]  # (W, n_ports)
    onset: int  # first window of the event (len(windows) for balanced)
    moving_onset: int  # first migration (moving only; else −1)
    hot_truth: list[tuple[int, ...]] = field(default_factory=list)  # per window: true hot ports
    moved: tuple[bool, ...] = ()  # per window: the true hot set moved in this window (if known)

    @property
    def n_windows(self) -> int:
        return int(self.fan_in.shape[0])


_GEO_CACHE: dict[tuple[int, int, int], FabricGeometry] = {}


def _geometry(servers: int, gpus: int, spines: int) -> FabricGeometry:
    key = (servers, gpus, spines)
    if key not in _GEO_CACHE:
        fabric = rail_optimized("scn", servers=servers, gpus_per_server=gpus, spines=spines)
        _GEO_CACHE[key] = fabric_geometry(build_port_index(fabric), fabric)
    return _GEO_CACHE[key]


def make_scenario(
    kind: str, seed: int, *, windows: int | None = None, servers: int = 32, gpus: int = 8, spines: int = 4
) -> Scenario:
    if kind not in KINDS:
        raise ValueError(f"unknown scenario kind {kind!r} (use one of {', '.join(KINDS)})")
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    geo = _geometry(servers, gpus, spines)
    w = windows or (600 if kind == "balanced" else 60)
    n = geo.n_ports
    host = np.flatnonzero(geo.is_leaf_host)
    up = np.flatnonzero(geo.is_uplink)

    # --- balanced PXN all-to-all background ---------------------------------------------------
    base = np.zeros(n, np.float32)
    base[host] = rng.uniform(0.25, 0.45, len(host))
    util = np.clip(base + rng.normal(0, 0.03, (w, n)).astype(np.float32) * (base > 0), 0, 1)
    util[:, ~geo.is_leaf_host] = rng.uniform(0.0, 0.01, (w, int((~geo.is_leaf_host).sum())))
    wm = (rng.lognormal(np.log(0.1 * KMAX), 0.5, (w, n))).astype(np.float32)
    ecn = np.zeros((w, n), np.float32)
    burst = rng.random((w, n)) < 0.01
    burst[:, ~geo.is_leaf_host] = False
    wm[burst] = rng.uniform(0.8, 2.0, int(burst.sum())) * KMAX
    ecn[burst] = rng.uniform(500, 5000, int(burst.sum()))
    pfc = np.zeros((w, n), np.float32)
    paused = np.zeros((w, n), np.float32)
    fan = np.zeros((w, n), np.float32)
    fan[:, host] = 31.0

    onset = int(rng.integers(10, 20)) if kind != "balanced" else w
    moving_onset = -1
    truth: list[tuple[int, ...]] = [() for _ in range(w)]

    def make_hot(t: int, ports: npt.NDArray[np.int64]) -> None:
        util[t, ports] = rng.uniform(0.85, 1.0, len(ports))
        wm[t, ports] = rng.uniform(1.5, 4.0, len(ports)) * KMAX
        ecn[t, ports] = rng.uniform(5e3, 5e5, len(ports))
        pfc[t, ports] = rng.uniform(0, 500, len(ports))
        paused[t, ports] = rng.uniform(0, 0.1, len(ports))
        fan[t, ports] = rng.integers(8, 32, len(ports))
        truth[t] = tuple(int(p) for p in ports)

    if kind in ("static", "moving"):
        n_hot = int(rng.integers(1, 3))
        hot = rng.choice(host, n_hot, replace=False)
        dwell = int(rng.integers(1, 5))
        for t in range(onset, w):
            if kind == "moving" and t > onset and (t - onset) % dwell == 0:
                hot = rng.choice(np.setdiff1d(host, hot), n_hot, replace=False)
                if moving_onset < 0:
                    moving_onset = t
            make_hot(t, hot)
    elif kind == "ecmp":
        util[:, up] = rng.uniform(0.2, 0.35, len(up)) + rng.normal(0, 0.02, (w, len(up)))
        leaves = rng.choice(len(geo.uplink_group_starts), int(rng.integers(1, 3)), replace=False)
        starts = np.r_[geo.uplink_group_starts, len(geo.uplink_ports)]
        victims = np.concatenate(
            [
                geo.uplink_ports[
                    rng.choice(np.arange(starts[g], starts[g + 1]), int(rng.integers(1, 4)), replace=False)
                ]
                for g in leaves
            ]
        )
        fan[:, up] = rng.integers(1, 3, len(up))
        for t in range(onset, w):
            util[t, victims] = rng.uniform(0.9, 1.0, len(victims))
            wm[t, victims] = rng.uniform(1.5, 3.0, len(victims)) * KMAX
            ecn[t, victims] = rng.uniform(5e3, 1e5, len(victims))
            fan[t, victims] = rng.integers(2, 4, len(victims))
    elif kind == "pfc":
        victim = int(rng.choice(host))
        leaf = geo.index.switch_of[victim]
        spread = up[geo.index.switch_of[up] == leaf]
        for t in range(onset, w):
            util[t, victim] = rng.uniform(0.0, 0.02)
            paused[t, victim] = rng.uniform(0.9, 1.0)
            pfc[t, victim] = rng.uniform(5e4, 2e5)
            wm[t, victim] = rng.uniform(2.0, 4.0) * KMAX
            paused[t, spread] = rng.uniform(0.3, 0.7, len(spread))
            pfc[t, spread] = rng.uniform(1e3, 3e4, len(spread))
            util[t, spread] = rng.uniform(0.0, 0.003, len(spread))
    util = np.clip(util, 0, 1).astype(np.float32)
    speed = geo.speed_bps
    metrics = {
        "util": util,
        "out_bps": (util * speed).astype(np.float32),
        "watermark_bytes": wm,
        "ecn_marked_ps": ecn,
        "pfc_pause_ps": pfc,
        "pfc_paused_fraction": paused,
    }
    return Scenario(kind, seed, geo, metrics, fan, onset, moving_onset, truth)


@dataclass(frozen=True)
class ScenarioResult:
    """Which alert kinds were firing in each window, and the first firing window per kind."""

    firing: list[frozenset[str]]
    first_firing: dict[str, int]
    windows_with_hot: int
    hot_sets: list[tuple[int, ...]] = field(default_factory=list)  # H(w) per window


def evaluate(
    scn: Scenario,
    cfg: DetectConfig | None = None,
    lifecycle: Mapping[str, LifecycleConfig] = DEFAULT_LIFECYCLE,
) -> ScenarioResult:
    """Run detection + lifecycle over every window of a scenario (1 s windows)."""
    cfg = cfg or DetectConfig()
    state = MovingState.initial(scn.geo.n_ports)
    slots: dict[str, Slot] = {}
    firing: list[frozenset[str]] = []
    first: dict[str, int] = {}
    with_hot = 0
    hot_sets: list[tuple[int, ...]] = []
    for t in range(scn.n_windows):
        frame = {k: v[t] for k, v in scn.metrics.items()}
        state, found = detect_window(frame, scn.geo, state, cfg, ts_ns=t * NS, fan_in=scn.fan_in[t])
        with_hot += int(found.incast)
        hot_sets.append(tuple(int(p) for p in found.hot_ports))
        slots, _ = advance(slots, conditions(found, scn.geo), t * NS, fabric="scn", config=lifecycle)
        kinds = frozenset(s.kind for s in slots.values() if s.state == "firing")
        for k in kinds:
            first.setdefault(k, t)
        firing.append(kinds)
    return ScenarioResult(firing, first, with_hot, hot_sets)


Batch = Callable[[str, Sequence[int]], list[Scenario]]


def score(
    seeds: int = 20, *, batch: Batch | None = None, cfg: DetectConfig | None = None, **make_kw: int
) -> dict[str, object]:
    """Confusion table (scenario kind × alert kinds fired) and moving-incast quality figures.

    ``batch(kind, seeds)`` supplies the scenarios (e.g. the twin's runner, twin/scenarios.py);
    by default this module's standalone generator makes them one by one."""
    make: Batch = batch or (lambda kind, ss: [make_scenario(kind, x, **make_kw) for x in ss])
    alert_kinds = ("incast", "moving_incast", "pfc_storm", "ecmp_imbalance", "none")
    table = {k: dict.fromkeys(alert_kinds, 0) for k in KINDS}
    latency: dict[str, list[int]] = {k: [] for k in KINDS}
    tp = fp = fn = 0
    win_tp = win_fp = win_fn = 0
    hot_hit = hot_total = 0
    bal_windows = bal_alert_windows = 0
    for kind in KINDS:
        for scn in make(kind, range(seeds)):
            res = evaluate(scn, cfg)
            if kind == "balanced":
                bal_windows += scn.n_windows
                bal_alert_windows += sum(bool(k) for k in res.firing)
            if kind in ("static", "moving"):
                # hot-port identity: after the allowed delay, is the true hot port in H(w)?
                for t in range(scn.onset + 2, scn.n_windows):
                    if scn.hot_truth[t]:
                        hot_total += 1
                        hot_hit += bool(set(scn.hot_truth[t]) & set(res.hot_sets[t]))
            fired = set(res.first_firing) & set(alert_kinds)
            for k in fired or {"none"}:
                table[kind][k] += 1
            expected = EXPECTED_ALERT[kind]
            onset = scn.moving_onset if kind == "moving" else scn.onset
            if expected in res.first_firing:
                latency[kind].append(res.first_firing[expected] - onset)
            is_moving = kind == "moving"
            did = "moving_incast" in fired
            tp += is_moving and did
            fp += (not is_moving) and did
            fn += is_moving and not did
            for t, kinds in enumerate(res.firing):
                truth = is_moving and t >= scn.moving_onset
                grace = is_moving and scn.moving_onset <= t < scn.moving_onset + 2
                pred = "moving_incast" in kinds
                if grace:
                    continue  # the allowed detection delay: neither hit nor miss
                win_tp += truth and pred
                win_fp += pred and not truth
                win_fn += truth and not pred
    return {
        "table": table,
        "latency_windows": latency,
        "moving_recall": tp / max(tp + fn, 1),
        "moving_precision": tp / max(tp + fp, 1),
        "moving_window_recall": win_tp / max(win_tp + win_fn, 1),
        "moving_window_precision": win_tp / max(win_tp + win_fp, 1),
        "hot_port_hit_rate": hot_hit / max(hot_total, 1),
        "balanced_windows": bal_windows,
        "balanced_alert_windows": bal_alert_windows,
    }


def format_table(result: Mapping[str, object]) -> str:
    table = result["table"]
    assert isinstance(table, dict)
    cols = ("incast", "moving_incast", "pfc_storm", "ecmp_imbalance", "none")
    lines = [f"{'truth/fired':<14}" + "".join(f"{c:>16}" for c in cols)]
    for kind, row in table.items():
        lines.append(f"{kind:<14}" + "".join(f"{row[c]:>16}" for c in cols))
    lat = result["latency_windows"]
    assert isinstance(lat, dict)
    lines.append(
        "max alert latency (windows after onset): "
        + ", ".join(f"{k}={max(v) if v else '-'}" for k, v in lat.items())
    )
    lines.append(
        f"moving incast: recall={result['moving_recall']:.3f} precision={result['moving_precision']:.3f} "
        f"window-recall={result['moving_window_recall']:.3f} "
        f"window-precision={result['moving_window_precision']:.3f}"
    )
    if "hot_port_hit_rate" in result:
        lines.append(
            f"hot port identified (static+moving, after 2 windows): {result['hot_port_hit_rate']:.3f}; "
            f"balanced: {result['balanced_alert_windows']} alert windows in {result['balanced_windows']}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_table(score()))
