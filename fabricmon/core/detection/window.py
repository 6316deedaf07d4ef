"""Per-window detection: incast, the hot set, moving incast, PFC storm, ECMP imbalance, rail-plan
violation and targets down — vectorized over the port index (fabric_model.md §7.2).

For window w and egress port p (``frame`` metrics are per-port float32, NaN = no data)::

    load ρ_p      = out_bps / speed_bps          (util when out_bps is absent)
    pressure_p    = WM_p ≥ Kmax  ∨  ECN_p ≥ ecn_min  ∨  PFC_p ≥ pfc_min
    incast(p)     = F_p ≥ F_min ∧ pressure_p ∧ (ρ_p ≥ load_min ∨ ρ_p ≥ rel_load · mean ρ of its peers)
                    (peers: the host-facing ports of p's leaf, or the ports of p's spine)
    H(w)          = { p : incast(p) }            (capped to the top_m by WM·F)
    J(w)          = |H(w) ∩ H(w−1)| / |H(w) ∪ H(w−1)|  over places: a port, or that port of every SU
                    (FabricGeometry.place; in one SU a place is a port)
    migrated(w)   = H(w−1) ≠ ∅ ∧ H(w) ≠ ∅ ∧ J(w) ≤ J_max ∧ H(w) \\ H(w−1) ≠ ∅ ∧ mean F over H(w) ≥ F_min
                    (H(w−1): the last non-empty hot set, up to ``migration_gap_windows`` back,
                     not counting up to ``migration_quiet_windows`` windows of a quiet fabric)
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
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from fabricmon.core.detection.config import DetectConfig
from fabricmon.core.detection.down import CollectionGroups, DownRollup, covered, down_switches, roll_up
from fabricmon.core.detection.geometry import FabricGeometry

FloatArray = npt.NDArray[np.float32]
PRESSURE_METRICS = ("watermark_bytes", "ecn_marked_ps", "pfc_pause_ps")  # queue telemetry (gNMI)
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class MovingState:
    """What the moving-incast rule carries from one window to the next."""

    prev_hot: BoolArray
    dwell: IntArray  # consecutive windows each port has been in H
    windows_since_migration: int = 1 << 30
    migrations: int = 0  # in this run of non-empty hot sets
    completed_dwell_sum: int = 0  # over stays that ended (for mean dwell)
    completed_dwell_count: int = 0
    no_data: IntArray | None = None  # per switch: consecutive windows without data (None: none yet)
    # consecutive empty windows since the last non-empty hot set, which ``prev_hot`` still holds
    # while this is below ``migration_gap_windows``: a hotspot that moves through a window or two
    # with nothing hot (a tick without queue telemetry, the poll straddling the move) still migrated
    gap: int = 0
    hot_ts_ns: int = 0  # the window ``prev_hot`` was seen in (where a migration came from, and when)
    quiet: int = 0  # empty windows since, in which the fabric was quiet: not counted in ``gap``
    # the target_down roll-ups held (per collection group; the fabric's), for their hysteresis
    down_groups_rolled: BoolArray | None = None
    down_fabric_rolled: bool = False
    down_covered: IntArray | None = None  # switch ids the roll-ups stood for (their members)
    # a move awaiting confirmation (``DetectConfig.migration_confirm_windows``): the hot set it was
    # first seen as, that window, and in how many windows it has been seen; ``prev_hot`` meanwhile
    # stays the hot set it moved from
    pending: IntArray | None = None
    pending_ts_ns: int = 0
    pending_seen: int = 0
    # while a straddle holds the hot set it moved from: the ports first seen hot beside it, and
    # that window — a move that lands on them was first seen there, not in the window it is raised
    straddle_new: IntArray | None = None
    straddle_ts_ns: int = 0

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
    # switches silenced together — most of the fabric, or most of a collection group (shard) — are
    # one stall of the collection path each, not one outage per switch (``detection.down``)
    down_rollups: tuple[DownRollup, ...] = ()
    # the hot ports had queue telemetry (watermark, ECN or PFC): False when incast was judged by
    # load and fan-in alone (an SNMP-only switch or tick), which the alerts say as lower confidence
    pressure_known: bool = True
    # False: no port had data this window (every poll missed it) — it says nothing about incast,
    # so the hot-set state is carried over it and the alerts hold (alerts.services)
    has_data: bool = True
    blind_windows: int = 0  # how many windows in a row no port had data (0 when this one had)
    # when it migrated: the hot set it moved from, and that set's window — an incast episode that
    # opens on a migration starts its trajectory there, so the hop that opened it is one of its steps
    from_ports: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    from_ts_ns: int = 0
    # when it migrated: the hot set it moved to and the window it was first seen in — this window's
    # for a move raised at once, an earlier one's for a move confirmed now or for one whose new
    # places were first hot beside the places it left (a straddle)
    moved_ports: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    moved_ts_ns: int = 0

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


def _peer_mean(load: FloatArray, geo: FabricGeometry) -> FloatArray:
    """Per port, the mean load of its peers: the other host-facing ports of its own leaf, or the
    other ports of its own spine (NaN where none has data). Peers on the same switch, not the fabric: each
    switch's counters are read at its own instants, so when a job's traffic comes in bursts of
    the poll's length (a large job's step: seconds of all-to-alls, then seconds of backward pass)
    one switch's 1 s rates can be twice another's. Against a fabric-wide mean every port of the
    leaf whose sample caught the burst looked 1.6x hot (the 16,896-port run's hot set jumped to a
    whole leaf every other second); within one switch the hot port still stands out."""
    peers = geo.is_leaf_host | geo.is_spine
    ok = peers & np.isfinite(load)
    sw = geo.index.switch_of
    n_sw = len(geo.index.switch_names)
    total = np.bincount(sw[ok], weights=load[ok], minlength=n_sw)
    count = np.bincount(sw[ok], minlength=n_sw)
    # leave-one-out: the port itself is not its own peer (at 32 ports a leaf, a hot port in its
    # own mean cut its ratio by a tenth, and dropped hot ports near the threshold)
    own = np.where(ok, load, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return ((total[sw] - own) / (count[sw] - ok)).astype(np.float32)


@dataclass(frozen=True)
class _HotSet:
    """The incast rule's result for one window: H(w) and the per-port inputs it was judged on."""

    hot: BoolArray  # (P,) H(w) as a mask
    idx: IntArray  # H(w), sorted by port index
    load: FloatArray
    fan: FloatArray  # NaN where unknown
    fan_unknown: BoolArray
    pressure_known: bool  # queue telemetry on every hot port (or, with none hot, anywhere)


def _hot_set(
    metrics: Mapping[str, FloatArray], geo: FabricGeometry, cfg: DetectConfig, fan_in: FloatArray | None
) -> _HotSet:
    """incast(p) for every candidate port, capped to the top_m ports by WM·F."""
    n = geo.n_ports
    load = _load(metrics, geo)
    wm = _metric(metrics, "watermark_bytes", n)
    ecn = _metric(metrics, "ecn_marked_ps", n)
    pfc = _metric(metrics, "pfc_pause_ps", n)
    # Per port: queue telemetry where any of it was measured (gNMI); where none was (an SNMP-only
    # switch, or a tick SNMP filled in for), utilization and fan-in alone, at the stricter ratio.
    measured = np.zeros(n, np.bool_)
    for m in PRESSURE_METRICS:
        if m in metrics:
            measured |= np.isfinite(metrics[m])
    pressure_known = bool(measured.any())
    with np.errstate(invalid="ignore"):
        queued = (wm >= cfg.watermark_kmax_bytes) | (ecn >= cfg.ecn_min_ps) | (pfc >= cfg.pfc_min_ps)
        pressure = np.where(measured, queued, True)
        rel_min = np.where(measured, cfg.rel_load_min, cfg.rel_load_min_without_pressure)
        if fan_in is None:
            fan = np.full(n, np.nan, np.float32)
        else:
            if fan_in.shape != (n,):
                raise ValueError(f"fan_in has shape {fan_in.shape}, expected ({n},)")
            fan = fan_in.astype(np.float32, copy=False)
        fan_unknown = np.isnan(fan)
        fan_ok = (fan >= cfg.fan_in_min) | (fan_unknown & cfg.assume_fan_in_when_unknown)
        ref = _peer_mean(load, geo)
        # an idle port is never "far above" idle peers: without the floor, 0 ≥ 1.6 × 0 made every
        # port of an unused spine hot whenever its queue telemetry was missing for a tick
        loaded = (load >= cfg.load_min) | ((load >= rel_min * ref) & (load >= cfg.rel_load_floor))
        hot = geo.incast_candidate & pressure & fan_ok & loaded
    hot_idx = np.flatnonzero(hot)
    if len(hot_idx) > cfg.top_m:
        score = np.nan_to_num(wm[hot_idx], nan=0.0) * np.nan_to_num(fan[hot_idx], nan=1.0) + load[hot_idx]
        keep = hot_idx[np.argsort(-score, kind="stable")[: cfg.top_m]]
        hot = np.zeros(n, np.bool_)
        hot[keep] = True
        hot_idx = np.sort(keep)
    known = bool(measured[hot_idx].all()) if len(hot_idx) else pressure_known
    return _HotSet(hot, hot_idx.astype(np.int64), load, fan, fan_unknown, known)


@dataclass(frozen=True)
class _Movement:
    """How H(w) relates to H(w−1): Jaccard, migration, jumps, and the state carried on."""

    state: MovingState
    jaccard: float
    both: bool  # both hot sets non-empty (J is defined)
    migrated: bool
    moving: bool
    leaf_jump: bool
    rail_jump: bool
    moved_idx: IntArray  # on a migration: the hot set it moved to, at first sight
    moved_ts_ns: int


_NONE = np.zeros(0, np.int64)


def _place_jaccard(hot_idx: IntArray, prev_idx: IntArray, geo: FabricGeometry) -> tuple[float, IntArray]:
    """J of two hot sets over their places (``FabricGeometry.place``: a port, or that port of every
    SU's leaf of its rail), and the hot ports at places the previous set did not hold. A job of many
    EP groups has its hot expert at one place in every SU (22 ports at 16,896); with traffic in
    bursts as long as the poll, each window saw another subset of those ports over the threshold,
    and over ports two subsets' J fell below J_max every other window (~70 'migrations' a skewed
    stretch). Over places they are one hot set. The cost: a hotspot moving to the same port of
    another SU's leaf is not a migration. In one SU a place is a port."""
    place = geo.place  # (built with the geometry: one per port, whatever the fabric)
    now, before = np.unique(place[hot_idx]), np.unique(place[prev_idx])
    union = len(np.union1d(now, before))
    jaccard = len(np.intersect1d(now, before, assume_unique=True)) / union if union else float("nan")
    return jaccard, hot_idx[~np.isin(place[hot_idx], before)]


def _clean_move(hot_idx: IntArray, new_idx: IntArray, geo: FabricGeometry, cfg: DetectConfig) -> bool:
    """A move raised the window it is seen: the hot set moved as a whole (its new places hold most
    of its hot ports) and its busiest new place is hot in enough of the SUs that have it
    (``DetectConfig.migration_clean_*``)."""
    places, counts = np.unique(geo.place[new_idx], return_counts=True)
    if not len(places):
        return False
    b = int(np.argmax(counts))
    return (len(new_idx) >= cfg.migration_clean_place_share * len(hot_idx)
            and int(counts[b]) >= cfg.migration_clean_su_share * int(geo.place_ports[places[b]]))


@dataclass(frozen=True)
class _Verdict:
    """Selective confirmation's answer for one window."""

    migrated: bool
    moved_idx: IntArray = field(default_factory=lambda: _NONE)  # on a migration: the set at first sight
    moved_ts_ns: int = 0
    pending: IntArray = field(default_factory=lambda: _NONE)  # a move still awaiting confirmation
    pending_ts_ns: int = 0
    pending_seen: int = 0


def _confirm(
    hot_idx: IntArray, new_idx: IntArray, state: MovingState, geo: FabricGeometry, cfg: DetectConfig,
    *, moved: bool, fan_high: bool, ts_ns: int,
) -> _Verdict:
    """Selective confirmation of this window's move (``moved``: the Jaccard rule's verdict against
    the hot set ``state.prev_hot``).

    A pending move is confirmed by a window whose hot ports are, by half or more, at its places
    (ports weigh, not places: the straggler ports of the set it left do not outvote the move); a
    window whose hot set is elsewhere drops it, and is judged as a move of its own; an empty window
    keeps it (the caller drops it with the hot set it moved from, past the gap bound)."""
    pending = state.pending if state.pending is not None else _NONE
    if len(pending) and not len(hot_idx):
        return _Verdict(False, pending=pending, pending_ts_ns=state.pending_ts_ns,
                        pending_seen=state.pending_seen)
    if len(pending) and fan_high:
        at = np.isin(geo.place[hot_idx], geo.place[pending])
        if 2 * int(np.count_nonzero(at)) >= len(hot_idx):
            seen = state.pending_seen + 1
            if seen >= cfg.migration_confirm_windows:
                return _Verdict(True, pending, state.pending_ts_ns)
            return _Verdict(False, pending=pending, pending_ts_ns=state.pending_ts_ns, pending_seen=seen)
    if not moved:
        return _Verdict(False)
    if cfg.migration_confirm_windows <= 1 or _clean_move(hot_idx, new_idx, geo, cfg):
        return _Verdict(True, hot_idx, ts_ns)
    return _Verdict(False, pending=new_idx, pending_ts_ns=ts_ns, pending_seen=1)


def _movement(
    hs: _HotSet, geo: FabricGeometry, state: MovingState, cfg: DetectConfig, ts_ns: int
) -> _Movement:
    """The moving-incast rule: Jaccard against the previous window, dwell, leaf / rail jumps."""
    hot, hot_idx = hs.hot, hs.idx
    prev = state.prev_hot
    prev_idx = np.flatnonzero(prev)
    both = len(hot_idx) > 0 and len(prev_idx) > 0
    jaccard, new_idx = _place_jaccard(hot_idx, prev_idx, geo)
    jaccard = jaccard if both else float("nan")
    mean_fan = (
        float(np.nanmean(hs.fan[hot_idx]))
        if len(hot_idx) and not hs.fan_unknown[hot_idx].all()
        else float("nan")
    )
    fan_high = (mean_fan >= cfg.fan_in_min) if np.isfinite(mean_fan) else cfg.assume_fan_in_when_unknown
    moved = bool(both and jaccard <= cfg.jaccard_max and len(new_idx) > 0 and fan_high)
    v = _confirm(hot_idx, new_idx, state, geo, cfg, moved=moved, fan_high=fan_high, ts_ns=ts_ns)
    migrated, moved_idx = v.migrated, v.moved_idx
    sw, place = geo.index.switch_of, geo.place
    went = moved_idx[~np.isin(place[moved_idx], place[prev_idx])]  # the ports it moved to
    leaf_jump = bool(migrated and not np.isin(sw[went], sw[prev_idx]).any())
    rail_jump = bool(migrated and not np.isin(geo.index.rail[went], geo.index.rail[prev_idx]).any())
    ended = prev & ~hot & (state.dwell > 0)  # a stay that ended this window (not one carried on)
    since = 0 if migrated else state.windows_since_migration + 1
    # quiet: nothing hot and no candidate port carrying even the relative rule's floor (NaN, no
    # data, is not load) — the job between all-to-alls, not a hotspot that ended
    with np.errstate(invalid="ignore"):
        quiet_now = not len(hot_idx) and not bool((hs.load[geo.incast_candidate] >= cfg.rel_load_floor).any())
    quiet_now = quiet_now and state.quiet < cfg.migration_quiet_windows  # past the bound: as loaded
    carrying = not len(hot_idx) and len(prev_idx) > 0 and (
        quiet_now or state.gap + 1 < cfg.migration_gap_windows)
    # a window straddling the move: the old places and new ones hot together (J above J_max, so no
    # migration, and the next window's J against it is as high). The hot set it moved from stays
    # the one judged against, for as many windows as an empty gap
    straddle = (both and not migrated and jaccard > cfg.jaccard_max and len(new_idx) > 0
                and state.gap + 1 < cfg.migration_gap_windows)
    waiting = len(v.pending) > 0 and len(hot_idx) > 0  # a move seen, not yet confirmed
    holding = carrying or straddle or waiting
    seen_new = state.straddle_new if state.straddle_new is not None else _NONE
    moved_ts = v.moved_ts_ns
    if migrated and len(seen_new) and np.isin(place[moved_idx], place[seen_new]).any():
        moved_ts = min(moved_ts, state.straddle_ts_ns)  # first seen beside the set it left
    if straddle:
        seen_new, seen_ts = np.union1d(seen_new, new_idx), state.straddle_ts_ns or ts_ns
    else:
        seen_ts = state.straddle_ts_ns
    keep = len(v.pending) > 0 and (carrying or waiting)  # else: the hot set it moved from is let go
    carried = MovingState(
        no_data=state.no_data,
        prev_hot=prev if holding else hot,
        dwell=np.where(hot, state.dwell + 1, 0),
        windows_since_migration=since,
        migrations=(state.migrations + int(migrated)) if len(hot_idx) or carrying else 0,
        completed_dwell_sum=state.completed_dwell_sum + int(state.dwell[ended].sum()),
        completed_dwell_count=state.completed_dwell_count + int(np.count_nonzero(ended)),
        gap=state.gap + int(straddle or waiting or not quiet_now) if holding else 0,
        quiet=state.quiet + int(quiet_now) if carrying else 0,
        hot_ts_ns=state.hot_ts_ns if holding else ts_ns,
        pending=v.pending if keep else None,
        pending_ts_ns=v.pending_ts_ns if keep else 0,
        pending_seen=v.pending_seen if keep else 0,
        straddle_new=seen_new if holding and len(seen_new) else None,
        straddle_ts_ns=seen_ts if holding and len(seen_new) else 0,
    )
    moving = bool(len(hot_idx) > 0 and since < cfg.moving_hold_windows)
    return _Movement(carried, jaccard, both, migrated, moving, leaf_jump, rail_jump, moved_idx, moved_ts)


def _rail_violations(
    load: FloatArray, geo: FabricGeometry, cfg: DetectConfig, rail_confined_switch: BoolArray | None
) -> IntArray:
    """Uplinks carrying traffic on leaves the run's routing (PXN) should keep on-rail."""
    if rail_confined_switch is None:
        return np.zeros(0, np.int64)
    with np.errstate(invalid="ignore"):
        bad = geo.is_uplink & rail_confined_switch[geo.index.switch_of] & (load >= cfg.rail_violation_util)
    return np.flatnonzero(bad).astype(np.int64)


def _pfc_storm(metrics: Mapping[str, FloatArray], geo: FabricGeometry, cfg: DetectConfig) -> IntArray:
    """Ports paused for at least ``storm_paused_fraction`` of the window (none below the minimum)."""
    with np.errstate(invalid="ignore"):
        paused = _metric(metrics, "pfc_paused_fraction", geo.n_ports)
        storm = np.flatnonzero(paused >= cfg.storm_paused_fraction)
    return storm.astype(np.int64) if len(storm) >= cfg.storm_min_ports else np.zeros(0, np.int64)


def detect_window(
    metrics: Mapping[str, FloatArray],
    geo: FabricGeometry,
    state: MovingState,
    cfg: DetectConfig,
    *,
    ts_ns: int = 0,
    fan_in: FloatArray | None = None,
    rail_confined_switch: BoolArray | None = None,
    collection_groups: CollectionGroups | None = None,
    late_switches: BoolArray | None = None,
) -> tuple[MovingState, WindowFindings]:
    """One window: returns the carried state for the next window and what was found.

    ``fan_in`` is per port (senders above ε of the port's bytes; from the run's projected traffic
    matrix), NaN or absent when unknown. ``rail_confined_switch`` marks leaves (by switch id) whose
    traffic the run's routing (PXN) should keep on-rail; their uplinks must then stay near idle.
    ``collection_groups`` says which switches one collector polls together (its shard), so that a
    stalled collector is one ``target_down``, not one per switch. ``late_switches`` (by switch id)
    are switches without cells in this frame that their collector heard from since the down span
    began: their data came after the frame was built, so they are late, not down.
    """
    hs = _hot_set(metrics, geo, cfg, fan_in)
    has_data = bool(np.isfinite(hs.load).any())
    mv = _movement(hs, geo, state, cfg, ts_ns)
    if not has_data:  # a blind window: what was hot stays the last hot set, nothing moved or ended
        mv = replace(mv, state=replace(state, windows_since_migration=state.windows_since_migration + 1),
                     migrated=False, moving=False, leaf_jump=False, rail_jump=False)
    n_sw = len(geo.index.switch_names)
    down, no_data = down_switches(hs.load, geo.index.switch_of, n_sw, state.no_data, cfg, late=late_switches)
    rollups, groups_rolled, fabric_rolled = roll_up(
        down, n_sw, collection_groups, cfg,
        was_groups=state.down_groups_rolled, was_fabric=state.down_fabric_rolled,
        was_covered=state.down_covered,
    )
    carried = replace(mv.state, no_data=no_data, down_groups_rolled=groups_rolled,
                      down_fabric_rolled=fabric_rolled, down_covered=covered(rollups))
    ecmp_sw, ecmp_ratio = _ecmp_imbalance(hs.load, geo, cfg)
    hot_idx = hs.idx
    findings = WindowFindings(
        ts_ns=ts_ns,
        hot_ports=hot_idx,
        fan_in_known=not bool(hs.fan_unknown[hot_idx].any()) if len(hot_idx) else fan_in is not None,
        jaccard=mv.jaccard,
        migrated=mv.migrated,
        moving=mv.moving,
        leaf_jump=mv.leaf_jump,
        rail_jump=mv.rail_jump,
        migration_rate=(1.0 - mv.jaccard) if mv.both else 0.0,
        mean_dwell_windows=(
            carried.completed_dwell_sum / carried.completed_dwell_count
            if carried.completed_dwell_count
            else float("nan")
        ),
        hot_dwell_windows=carried.dwell[hot_idx],
        hot_fan_in=hs.fan[hot_idx],
        hot_load=hs.load[hot_idx],
        storm_ports=_pfc_storm(metrics, geo, cfg),
        ecmp_switches=ecmp_sw,
        ecmp_ratio=ecmp_ratio,
        rail_violation_ports=_rail_violations(hs.load, geo, cfg, rail_confined_switch),
        down_switches=down,
        down_rollups=rollups,
        migrations=carried.migrations,
        pressure_known=hs.pressure_known,
        has_data=has_data,
        blind_windows=0 if has_data or not len(no_data) else int(no_data.min()),
        # where it migrated from: the hot set the move was judged against (``state.prev_hot``)
        from_ports=np.flatnonzero(state.prev_hot).astype(np.int64) if mv.migrated else np.zeros(0, np.int64),
        from_ts_ns=state.hot_ts_ns if mv.migrated else 0,
        moved_ports=mv.moved_idx.astype(np.int64),
        moved_ts_ns=mv.moved_ts_ns,
    )
    return carried, findings


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
