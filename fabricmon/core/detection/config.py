"""Detection thresholds for one fabric (fabric_model.md §1.6/§7), with per-fabric overrides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any


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
    # Without queue telemetry (SNMP-only: no watermark, ECN or PFC in the frame) the rule judges by
    # load and fan-in alone, at a stricter ratio, and says its confidence is low.
    rel_load_min_without_pressure: float = 1.8
    rel_load_floor: float = 0.05  # below this load a port is never incast by the relative rule
    top_m: int = 16  # cap the hot set to the top-m ports by WM·F
    # J_max: at or below, the hot set's identity changed. 0.34, not 0.5: one warm port joining a
    # one-port hot set gives J = 0.5 and must not count as a migration (static incast on the twin).
    jaccard_max: float = 0.34
    moving_hold_windows: int = 8  # a migration keeps "moving" true this long while H ≠ ∅
    # the hot set a migration is judged against may be this many windows back: empty ones between,
    # or ones straddling the move (the old places and new ones hot together in one poll)
    migration_gap_windows: int = 3
    # … and besides those, up to this many windows in which the fabric was quiet (no candidate port
    # at rel_load_floor: the job between its steps' all-to-alls, in a backward pass or optimizer
    # step). A quiet window says nothing about where the hotspot is, so it does not end it: at
    # 5,632 GPUs a step's all-to-alls are seconds apart, and a hotspot that moved from one step to
    # the next came back after 3-6 quiet windows as a hotspot "appearing" (2 of the 5 misses of a
    # 16,896-port run). Past this many they count as the others do: a job quiet for longer (a
    # checkpoint, a stall) starts afresh.
    migration_quiet_windows: int = 10
    # Selective confirmation. A move is raised the window it is seen when it is *clean*: the places
    # it moved to hold at least ``migration_clean_place_share`` of the hot ports (it moved as a
    # whole), and the busiest of them is hot in at least ``migration_clean_su_share`` of the SUs
    # that have it (a job's hot expert shows at one place in every SU). Any other move — part of
    # the hot set, a one-SU hotspot at 16,896 ports — is a candidate until the hot set has been
    # at its new places in ``migration_confirm_windows`` windows (the first sight counting as
    # one): a stall's partial frame, or a burst that lands on a few ports for one poll, looks like
    # that, and a real move dwells. A confirmed move is dated at its first sight (when it
    # happened) and raised at confirmation. 1 = every move raised at once.
    migration_confirm_windows: int = 2
    migration_clean_place_share: float = 0.75
    migration_clean_su_share: float = 0.5
    storm_paused_fraction: float = 0.3  # PFC storm: port paused for ≥ this share of the window
    storm_min_ports: int = 1
    ecmp_max_over_mean: float = 1.6  # busiest uplink / mean uplink of the same leaf
    ecmp_min_util: float = 0.5  # … and the busiest uplink at least this loaded
    rail_violation_util: float = 0.05  # uplink load on a rail the run's routing keeps local (PXN)
    # A switch is down after this many windows in a row without data on any port: one late or lost
    # poll is a late cell, not an outage.
    down_windows: int = 3
    # When more than this share of the fabric's switches (and at least two) are down in the same
    # window, that is one stall of the collection path — the collectors, their box, the management
    # network — not that many switch outages: one fabric-wide target_down instead of one per switch
    # (Alertmanager would inhibit the per-target alerts with it). At 16,896 ports a saturated box
    # stalled every gNMI stream for ~3 s and raised 184 alerts saying the same thing.
    # The same within one collection group (a collector shard): its switches share one poll loop,
    # so a stuck or starved collector silences them together. (The 16,896-port runs' partial stalls,
    # 8–30 % of the switches, were spread over every shard: not a stuck collector.)
    down_rollup_fraction: float = 0.5
    # A roll-up, once started, holds while more than this share is still down (hysteresis): the
    # switches of a stalled shard come back over a few staggered seconds, and the last few are part
    # of the same stall, not outages of their own.
    down_rollup_hold_fraction: float = 0.25

    def __post_init__(self) -> None:
        problems = [
            f"{f.name} must be ≥ 0 (got {getattr(self, f.name)})"
            for f in fields(self)
            if isinstance(getattr(self, f.name), int | float) and getattr(self, f.name) < 0
        ]
        if not 0.0 <= self.down_rollup_fraction <= 1.0:
            problems.append(f"down_rollup_fraction must be within [0, 1] (got {self.down_rollup_fraction})")
        if not 0.0 <= self.down_rollup_hold_fraction <= self.down_rollup_fraction:
            problems.append("down_rollup_hold_fraction must be within [0, down_rollup_fraction] "
                            f"(got {self.down_rollup_hold_fraction})")
        if self.migration_confirm_windows < 1:
            problems.append(
                f"migration_confirm_windows must be at least 1 (got {self.migration_confirm_windows})")
        for name in ("migration_clean_place_share", "migration_clean_su_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                problems.append(f"{name} must be within [0, 1] (got {getattr(self, name)})")
        if not 0.0 <= self.jaccard_max <= 1.0:
            problems.append(f"jaccard_max must be within [0, 1] (got {self.jaccard_max})")
        if self.top_m < 1 or self.moving_hold_windows < 1 or self.down_windows < 1:
            problems.append("top_m, moving_hold_windows and down_windows must be ≥ 1")
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
