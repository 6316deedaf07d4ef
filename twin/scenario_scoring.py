"""Scoring detection on seeded scenarios with ground truth: the scenario shape, running the detector
and lifecycle over it, per-kind recall / precision / latency, and the confusion table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fabricmon.core.detection.conditions import conditions
from fabricmon.core.detection.config import DetectConfig
from fabricmon.core.detection.geometry import FabricGeometry
from fabricmon.core.detection.lifecycle import DEFAULT_LIFECYCLE, LifecycleConfig, Slot, advance
from fabricmon.core.detection.window import MovingState, detect_window

KINDS = ("static", "moving", "balanced", "ecmp", "pfc")
# The alert kind each scenario is expected to raise (balanced: none at all).
EXPECTED_ALERT = {
    "static": "incast",
    "moving": "moving_incast",
    "balanced": None,
    "ecmp": "ecmp_imbalance",
    "pfc": "pfc_storm",
}


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


Batch = Callable[[str, Sequence[int]], list[Scenario]]  # (kind, seeds) → scenarios


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


def score(seeds: int = 20, *, batch: Batch, cfg: DetectConfig | None = None) -> dict[str, object]:
    """Confusion table (scenario kind × alert kinds fired) and moving-incast quality figures.

    ``batch(kind, seeds)`` supplies the scenarios: the twin's runner (twin/scenarios.py) or the
    synthetic generator (``twin.synthetic_scenarios.synthetic_batch``)."""
    make = batch
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
