"""Per-window detection: incast, the hot set, moving incast, PFC storm, ECMP imbalance, rail-plan
violation and targets down — vectorized over the port index (fabric_model.md §7.2).

For window w and egress port p (``frame`` metrics are per-port float32, NaN = no data)::

    load ρ_p      = out_bps / speed_bps          (util when out_bps is absent)
    pressure_p    = WM_p ≥ Kmax  ∨  ECN_p ≥ ecn_min  ∨  PFC_p ≥ pfc_min
    incast(p)     = F_p ≥ F_min ∧ pressure_p ∧ (ρ_p ≥ load_min ∨ ρ_p ≥ rel_load · mean ρ of its peers)
    H(w)          = { p : incast(p) }            (capped to the top_m by WM·F)
    J(w)          = |H(w) ∩ H(w−1)| / |H(w) ∪ H(w−1)|
    migrated(w)   = H(w−1) ≠ ∅ ∧ H(w) ≠ ∅ ∧ J(w) ≤ J_max ∧ H(w) \\ H(w−1) ≠ ∅ ∧ mean F over H(w) ≥ F_min
    moving(w)     = H(w) ≠ ∅ ∧ a migration within the last ``moving_hold_windows``

Why relative load: a 1 s poll averages MoE phases away (a 5 ms burst is 0.5 % of the sample), so
ρ > 1 is never measured; but the *ratio* of a hot GPU's port to its peers survives averaging
(≈4.5× under realistic skew), while microbursts of a balanced all-to-all raise watermarks
without raising that ratio. Leaf uplinks are judged by the ECMP rule, not the incast rule.

Everything here is pure numpy over arrays; the only per-window Python work is on the hot set,
which is small (a handful of ports), never on all ports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from fabricmon.core.topology import FabricSpec, PortIndex

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class DetectConfig:
    """Thresholds for one fabric. Defaults follow fabric_model.md §1.6/§7; every field can be
    overridden per fabric with :meth:`from_mapping`."""

    fan_in_min: float = 4.0  # F_min: "many" senders (A2A on one SU gives up to 31)
    assume_fan_in_when_unknown: bool = True  # no run known → judge by counters, say fan-in unknown
    watermark_kmax_bytes: float = 1_600_000.0  # ECN Kmax on 400G RoCE queues (~1.6 MB)
    ecn_min_ps: float = 1_000.0  # ECN-marked packets/s that count as pressure
    pfc_min_ps: float = 100.0  # pause frames/s that count as pressure
    load_min: float = 0.95  # absolute egress load that is incast-worthy on its own
    # … or this many times the mean load of its peer ports. 1.6, not 2.0: on the twin's traffic the
    # balanced combine all-to-all that follows each dispatch dilutes a 4.5× hot expert to ~2×
    # port load (5th percentile 1.5×), while warm experts of σ = 0.3 skew stay ≤ ~1.6×.
    rel_load_min: float = 1.6
    top_m: int = 16  # cap the hot set to the top-m ports by WM·F
    # J_max: at or below, the hot set's identity changed. 0.34, not 0.5: one warm port joining a
    # one-port hot set gives J = 0.5 and must not count as a migration (static incast on the twin).
    jaccard_max: float = 0.34
    moving_hold_windows: int = 8  # a migration keeps "moving" true this long while H ≠ ∅
    storm_paused_fraction: float = 0.3  # PFC storm: port paused for ≥ this share of the window
    storm_min_ports: int = 1
    ecmp_max_over_mean: float = 1.6  # busiest uplink / mean uplink of the same leaf
    ecmp_min_util: float = 0.5  # … and the busiest uplink at least this loaded
    rail_violation_util: float = 0.05  # uplink load on a rail the run's routing keeps local (PXN)

    def __post_init__(self) -> None:
        problems = [
            f"{f.name} must be ≥ 0 (got {getattr(self, f.name)})"
            for f in fields(self)
            if isinstance(getattr(self, f.name), int | float) and getattr(self, f.name) < 0
        ]
        if not 0.0 <= self.jaccard_max <= 1.0:
            problems.append(f"jaccard_max must be within [0, 1] (got {self.jaccard_max})")
        if self.top_m < 1 or self.moving_hold_windows < 1:
            problems.append("top_m and moving_hold_windows must be ≥ 1")
        if problems:
            raise ValueError("DetectConfig: " + "; ".join(problems))

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> DetectConfig:
        """Per-fabric overrides (e.g. a JSON field); unknown keys are an error naming them."""
        raw = dict(raw or {})
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ValueError(f"DetectConfig: unknown setting(s) {', '.join(unknown)}")
        typed: dict[str, Any] = {}
        for key, value in raw.items():
            kind = type(getattr(cls(), key))
            try:
                typed[key] = kind(value) if kind is not bool else bool(value)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"DetectConfig: {key}={value!r} is not a {kind.__name__}") from exc
        return replace(cls(), **typed)


@dataclass(frozen=True)
class FabricGeometry:
    """What detection needs from the port index, precomputed once per topology version."""

    index: PortIndex
    is_leaf_host: BoolArray  # leaf port facing a NIC
    is_spine: BoolArray
    is_uplink: BoolArray  # leaf port facing a spine
    incast_candidate: BoolArray  # egress ports the incast rule judges (host-facing + spine downlinks)
    uplink_ports: IntArray  # indices of uplinks, grouped by switch (index order)
    uplink_group_starts: IntArray  # reduceat offsets into uplink_ports, one per leaf with uplinks
    uplink_group_switch: IntArray  # switch id of each group
    speed_bps: FloatArray
    host_of: IntArray  # per port: host number facing it, −1 if none
    gpu_of: IntArray  # per port: GPU index on that host, −1 if none
    host_names: tuple[str, ...] = ()

    @property
    def n_ports(self) -> int:
        return len(self.index)


def fabric_geometry(index: PortIndex, fabric: FabricSpec | None = None) -> FabricGeometry:
    """Masks and groups for detection; ``fabric`` (optional) adds port → host/GPU for trajectories."""
    n = len(index)
    is_spine = index.rail < 0
    is_uplink = ~index.host_facing & ~is_spine
    uplinks = np.flatnonzero(is_uplink).astype(np.int64)
    sw = index.switch_of[uplinks]
    starts = (
        np.flatnonzero(np.r_[True, sw[1:] != sw[:-1]]).astype(np.int64)
        if len(uplinks)
        else np.zeros(0, np.int64)
    )
    host_of = np.full(n, -1, np.int64)
    gpu_of = np.full(n, -1, np.int64)
    host_names: tuple[str, ...] = ()
    if fabric is not None:
        host_names = tuple(h.name for h in fabric.hosts)
        by_name = {(index.switch_names[index.switch_of[i]], index.port_names[i]): i for i in range(n)}
        for h_i, host in enumerate(fabric.hosts):
            for gpu in host.gpus:
                p = by_name.get((gpu.switch, gpu.port))
                if p is not None:
                    host_of[p], gpu_of[p] = h_i, gpu.index
    return FabricGeometry(
        index=index,
        is_leaf_host=index.host_facing & ~is_spine,
        is_spine=is_spine,
        is_uplink=is_uplink,
        incast_candidate=index.host_facing | is_spine,
        uplink_ports=uplinks,
        uplink_group_starts=starts,
        uplink_group_switch=sw[starts].astype(np.int64) if len(uplinks) else np.zeros(0, np.int64),
        speed_bps=index.speed_bps.astype(np.float32),
        host_of=host_of,
        gpu_of=gpu_of,
        host_names=host_names,
    )


@dataclass(frozen=True)
class MovingState:
    """What the moving-incast rule carries from one window to the next."""

    prev_hot: BoolArray
    dwell: IntArray  # consecutive windows each port has been in H
    windows_since_migration: int = 1 << 30
    migrations: int = 0  # in this run of non-empty hot sets
    completed_dwell_sum: int = 0  # over stays that ended (for mean dwell)
    completed_dwell_count: int = 0

    @classmethod
    def initial(cls, n_ports: int) -> MovingState:
        return cls(prev_hot=np.zeros(n_ports, np.bool_), dwell=np.zeros(n_ports, np.int64))


@dataclass(frozen=True)
class WindowFindings:
    """Everything one window revealed. Arrays of port indices are small (hot set, offenders)."""

    ts_ns: int
    hot_ports: IntArray  # H(w), sorted by score, hottest first
    fan_in_known: bool
    jaccard: float  # NaN when either hot set is empty
    migrated: bool
    moving: bool
    leaf_jump: bool
    rail_jump: bool
    migration_rate: float  # 1 − J(w), 0 when no comparison
    mean_dwell_windows: float  # over stays that ended so far (NaN if none)
    hot_dwell_windows: IntArray  # per hot port
    hot_fan_in: FloatArray
    hot_load: FloatArray
    storm_ports: IntArray
    ecmp_switches: IntArray  # leaf switch ids with imbalanced uplinks
    ecmp_ratio: FloatArray  # busiest / mean uplink load per flagged leaf
    rail_violation_ports: IntArray
    down_switches: IntArray
    migrations: int = 0

    @property
    def incast(self) -> bool:
        return len(self.hot_ports) > 0


def _metric(metrics: Mapping[str, FloatArray], name: str, n: int) -> FloatArray:
    arr = metrics.get(name)
    if arr is None:
        return np.zeros(n, np.float32)
    if arr.shape != (n,):
        raise ValueError(f"metric {name!r} has shape {arr.shape}, expected ({n},)")
    return arr


def _load(metrics: Mapping[str, FloatArray], geo: FabricGeometry) -> FloatArray:
    n = geo.n_ports
    if "out_bps" in metrics:
        return _metric(metrics, "out_bps", n) / geo.speed_bps
    return _metric(metrics, "util", n)


def _mean_where(values: FloatArray, mask: BoolArray) -> float:
    sel = values[mask]
    ok = np.isfinite(sel)
    count = int(ok.sum())
    return float(sel[ok].sum() / count) if count else float("nan")


def detect_window(
    metrics: Mapping[str, FloatArray],
    geo: FabricGeometry,
    state: MovingState,
    cfg: DetectConfig,
    *,
    ts_ns: int = 0,
    fan_in: FloatArray | None = None,
    rail_confined_switch: BoolArray | None = None,
) -> tuple[MovingState, WindowFindings]:
    """One window: returns the carried state for the next window and what was found.

    ``fan_in`` is per port (senders above ε of the port's bytes; from the run's projected traffic
    matrix), NaN or absent when unknown. ``rail_confined_switch`` marks leaves (by switch id) whose
    traffic the run's routing (PXN) should keep on-rail; their uplinks must then stay near idle.
    """
    n = geo.n_ports
    load = _load(metrics, geo)
    wm = _metric(metrics, "watermark_bytes", n)
    ecn = _metric(metrics, "ecn_marked_ps", n)
    pfc = _metric(metrics, "pfc_pause_ps", n)
    with np.errstate(invalid="ignore"):
        pressure = (wm >= cfg.watermark_kmax_bytes) | (ecn >= cfg.ecn_min_ps) | (pfc >= cfg.pfc_min_ps)
        if fan_in is None:
            fan = np.full(n, np.nan, np.float32)
        else:
            if fan_in.shape != (n,):
                raise ValueError(f"fan_in has shape {fan_in.shape}, expected ({n},)")
            fan = fan_in.astype(np.float32, copy=False)
        fan_unknown = np.isnan(fan)
        fan_ok = (fan >= cfg.fan_in_min) | (fan_unknown & cfg.assume_fan_in_when_unknown)
        # Peers: host-facing ports compare with host-facing ports, spine ports with spine ports.
        ref = np.where(geo.is_spine, _mean_where(load, geo.is_spine), _mean_where(load, geo.is_leaf_host))
        loaded = (load >= cfg.load_min) | (load >= cfg.rel_load_min * ref)
        hot = geo.incast_candidate & pressure & fan_ok & loaded
    hot_idx = np.flatnonzero(hot)
    if len(hot_idx) > cfg.top_m:
        score = np.nan_to_num(wm[hot_idx], nan=0.0) * np.nan_to_num(fan[hot_idx], nan=1.0) + load[hot_idx]
        keep = hot_idx[np.argsort(-score, kind="stable")[: cfg.top_m]]
        hot = np.zeros(n, np.bool_)
        hot[keep] = True
        hot_idx = np.sort(keep)

    # --- moving incast: Jaccard, dwell, jumps -----------------------------------------------
    prev = state.prev_hot
    prev_idx = np.flatnonzero(prev)
    inter = int(np.count_nonzero(hot & prev))
    union = int(np.count_nonzero(hot | prev))
    both = len(hot_idx) > 0 and len(prev_idx) > 0
    jaccard = inter / union if both else float("nan")
    new_idx = hot_idx[~prev[hot_idx]]
    mean_fan = (
        float(np.nanmean(fan[hot_idx])) if len(hot_idx) and not fan_unknown[hot_idx].all() else float("nan")
    )
    fan_high = (mean_fan >= cfg.fan_in_min) if np.isfinite(mean_fan) else cfg.assume_fan_in_when_unknown
    migrated = bool(both and jaccard <= cfg.jaccard_max and len(new_idx) > 0 and fan_high)
    sw = geo.index.switch_of
    leaf_jump = bool(migrated and not np.isin(sw[new_idx], sw[prev_idx]).any())
    rail_jump = bool(migrated and not np.isin(geo.index.rail[new_idx], geo.index.rail[prev_idx]).any())

    ended = prev & ~hot
    dwell = np.where(hot, state.dwell + 1, 0)
    since = 0 if migrated else state.windows_since_migration + 1
    moving = bool(len(hot_idx) > 0 and since < cfg.moving_hold_windows)
    new_state = MovingState(
        prev_hot=hot,
        dwell=dwell,
        windows_since_migration=since,
        migrations=(state.migrations + int(migrated)) if len(hot_idx) else 0,
        completed_dwell_sum=state.completed_dwell_sum + int(state.dwell[ended].sum()),
        completed_dwell_count=state.completed_dwell_count + int(np.count_nonzero(ended)),
    )
    mean_dwell = (
        new_state.completed_dwell_sum / new_state.completed_dwell_count
        if new_state.completed_dwell_count
        else float("nan")
    )

    # --- PFC storm, ECMP imbalance, rail-plan violation, targets down --------------------------
    with np.errstate(invalid="ignore"):
        storm = np.flatnonzero(_metric(metrics, "pfc_paused_fraction", n) >= cfg.storm_paused_fraction)
    if len(storm) < cfg.storm_min_ports:
        storm = storm[:0]
    ecmp_sw, ecmp_ratio = _ecmp_imbalance(load, geo, cfg)
    rail_bad = np.zeros(0, np.int64)
    if rail_confined_switch is not None:
        with np.errstate(invalid="ignore"):
            bad = geo.is_uplink & rail_confined_switch[sw] & (load >= cfg.rail_violation_util)
        rail_bad = np.flatnonzero(bad)
    has_data = np.isfinite(load)
    per_switch = np.bincount(sw, weights=has_data, minlength=len(geo.index.switch_names))
    down = np.flatnonzero(per_switch == 0).astype(np.int64)

    findings = WindowFindings(
        ts_ns=ts_ns,
        hot_ports=hot_idx.astype(np.int64),
        fan_in_known=not bool(fan_unknown[hot_idx].any()) if len(hot_idx) else fan_in is not None,
        jaccard=jaccard,
        migrated=migrated,
        moving=moving,
        leaf_jump=leaf_jump,
        rail_jump=rail_jump,
        migration_rate=(1.0 - jaccard) if both else 0.0,
        mean_dwell_windows=mean_dwell,
        hot_dwell_windows=dwell[hot_idx],
        hot_fan_in=fan[hot_idx],
        hot_load=load[hot_idx],
        storm_ports=storm.astype(np.int64),
        ecmp_switches=ecmp_sw,
        ecmp_ratio=ecmp_ratio,
        rail_violation_ports=rail_bad.astype(np.int64),
        down_switches=down,
        migrations=new_state.migrations,
    )
    return new_state, findings


def _ecmp_imbalance(load: FloatArray, geo: FabricGeometry, cfg: DetectConfig) -> tuple[IntArray, FloatArray]:
    """Per leaf: busiest uplink over the mean of its uplinks (reduceat over contiguous groups)."""
    if not len(geo.uplink_ports):
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    up = np.nan_to_num(load[geo.uplink_ports], nan=0.0)
    starts = geo.uplink_group_starts
    sizes = np.diff(np.r_[starts, len(up)])
    peak = np.maximum.reduceat(up, starts)
    mean = np.add.reduceat(up, starts) / sizes
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(mean > 0, peak / mean, 0.0)
    flagged = (peak >= cfg.ecmp_min_util) & (ratio >= cfg.ecmp_max_over_mean)
    return geo.uplink_group_switch[flagged], ratio[flagged].astype(np.float32)


@dataclass(frozen=True)
class TrajectoryStep:
    """Where the hot set was in one window: ports → hosts → GPUs (→ ranks when a run is known)."""

    ts_ns: int
    ports: tuple[str, ...]  # "switch:port"
    hosts: tuple[str, ...]
    gpus: tuple[int, ...]
    ranks: tuple[int, ...] = ()
    leaf_jump: bool = False
    rail_jump: bool = False


def trajectory_step(
    findings: WindowFindings, geo: FabricGeometry, rank_of_port: Mapping[int, int] | None = None
) -> TrajectoryStep:
    """Names for the hot set of one window (small: hot set only)."""
    idx = geo.index
    ports = tuple(f"{idx.switch_names[idx.switch_of[p]]}:{idx.port_names[p]}" for p in findings.hot_ports)
    hosts = tuple(
        geo.host_names[h] if 0 <= h < len(geo.host_names) else "" for h in geo.host_of[findings.hot_ports]
    )
    ranks = (
        tuple(rank_of_port[int(p)] for p in findings.hot_ports if int(p) in rank_of_port)
        if rank_of_port
        else ()
    )
    return TrajectoryStep(
        ts_ns=findings.ts_ns,
        ports=ports,
        hosts=hosts,
        gpus=tuple(int(g) for g in geo.gpu_of[findings.hot_ports]),
        ranks=ranks,
        leaf_jump=findings.leaf_jump,
        rail_jump=findings.rail_jump,
    )


@dataclass(frozen=True)
class Condition:
    """One rule's verdict for one scope in one window — the input of the alert lifecycle.

    ``key`` identifies the scope (the fingerprint is built from fabric + kind + key), so a moving
    incast is one key per fabric (it stays one alert while it moves), a static incast one per port.
    """

    kind: str  # incast | moving_incast | pfc_storm | ecmp_imbalance | rail_violation | target_down
    key: str
    summary: str
    value: float = 0.0
    ports: tuple[int, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)


def conditions(findings: WindowFindings, geo: FabricGeometry) -> list[Condition]:
    """Turn findings into rule conditions. Per-port incast is inhibited while the hot set moves,
    so operators get one moving-incast alert rather than one alert per port it visits."""
    idx = geo.index
    out: list[Condition] = []

    def port_name(p: int) -> str:
        return f"{idx.switch_names[idx.switch_of[p]]}:{idx.port_names[p]}"

    if findings.moving:
        out.append(
            Condition(
                "moving_incast",
                "fabric",
                f"moving incast: hot set {', '.join(port_name(int(p)) for p in findings.hot_ports[:4])}"
                f" (J={findings.jaccard:.2f}, {findings.migrations} migrations"
                f"{', leaf jump' if findings.leaf_jump else ''}"
                f"{', rail jump' if findings.rail_jump else ''})",
                value=findings.migration_rate,
                ports=tuple(int(p) for p in findings.hot_ports),
                details={
                    "leaf_jump": findings.leaf_jump,
                    "rail_jump": findings.rail_jump,
                    "migrations": findings.migrations,
                    "fan_in_known": findings.fan_in_known,
                },
            )
        )
    else:
        for p, f, ld in zip(findings.hot_ports, findings.hot_fan_in, findings.hot_load, strict=True):
            fan = f"fan-in {f:.0f}" if np.isfinite(f) else "fan-in unknown"
            out.append(
                Condition(
                    "incast",
                    port_name(int(p)),
                    f"incast on {port_name(int(p))}: load {ld:.2f}, {fan}",
                    value=float(ld),
                    ports=(int(p),),
                )
            )
    sw_storm = np.unique(idx.switch_of[findings.storm_ports])
    for s in sw_storm:
        ports = findings.storm_ports[idx.switch_of[findings.storm_ports] == s]
        out.append(
            Condition(
                "pfc_storm",
                idx.switch_names[s],
                f"PFC storm on {idx.switch_names[s]}: {len(ports)} port(s) paused",
                value=float(len(ports)),
                ports=tuple(int(p) for p in ports),
            )
        )
    for s, r in zip(findings.ecmp_switches, findings.ecmp_ratio, strict=True):
        out.append(
            Condition(
                "ecmp_imbalance",
                idx.switch_names[s],
                f"ECMP imbalance on {idx.switch_names[s]} uplinks: busiest {r:.1f}× mean",
                value=float(r),
            )
        )
    for s in np.unique(idx.switch_of[findings.rail_violation_ports]):
        out.append(
            Condition(
                "rail_violation",
                idx.switch_names[s],
                f"rail-plan violation: traffic leaves rail via {idx.switch_names[s]} uplinks",
            )
        )
    for s in findings.down_switches:
        out.append(Condition("target_down", idx.switch_names[s], f"{idx.switch_names[s]}: no data"))
    return out
