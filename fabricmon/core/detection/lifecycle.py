"""Alert lifecycle as a pure state machine: inactive → pending → firing → resolved.

Prometheus semantics (reliability.md §2): a condition must hold for ``for_s`` before it fires (a
one-window microburst stays pending and is dropped), and a firing alert keeps firing for
``keep_firing_s`` after the condition last held, so a hot set that blinks for a window does not
resolve and re-fire. One slot per fingerprint (fabric + kind + scope key [+ run]) — dedup is
simply "same fingerprint, same slot".

The Django app stores each :class:`Transition` as a row; this module never touches storage.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from fabricmon.core.detection.conditions import Condition

State = Literal["inactive", "pending", "firing", "resolved"]


@dataclass(frozen=True)
class LifecycleConfig:
    """Per rule kind: how long a condition must hold, and how long firing outlives it."""

    for_s: float = 1.0
    keep_firing_s: float = 3.0

    def __post_init__(self) -> None:
        if self.for_s < 0 or self.keep_firing_s < 0:
            raise ValueError(f"LifecycleConfig: for_s and keep_firing_s must be ≥ 0 (got {self})")


DEFAULT_LIFECYCLE: Mapping[str, LifecycleConfig] = {
    "incast": LifecycleConfig(for_s=1.0, keep_firing_s=3.0),
    # a hot set that moves every few seconds, then rests a little longer than moving_hold_windows,
    # is still the same moving incast: one alert while the hotspot keeps moving, not one per hop.
    # It fires in the window that sees the migration (for 0): a migration already spans two windows
    # — the hot set before it and the new one, with fan-in — so waiting one more would only make
    # the alert late (three windows after the hotspot moved, not two).
    "moving_incast": LifecycleConfig(for_s=0.0, keep_firing_s=15.0),
    "pfc_storm": LifecycleConfig(for_s=1.0, keep_firing_s=3.0),
    "ecmp_imbalance": LifecycleConfig(for_s=1.0, keep_firing_s=3.0),
    "rail_violation": LifecycleConfig(for_s=2.0, keep_firing_s=5.0),
    # with DetectConfig.down_windows: down after 3 windows without data and 2 s more; up again only
    # after 10 s of data — one alert per outage, never a flap per slow poll
    "target_down": LifecycleConfig(for_s=2.0, keep_firing_s=10.0),
    # judged by the periodic LLDP cabling check, not per window: a cable seen where it must not be
    # fires at the check that sees it, and resolves at the first check that no longer does
    "rail_plan_violation": LifecycleConfig(for_s=0.0, keep_firing_s=0.0),
}


def fingerprint(fabric: str, kind: str, key: str, run: str = "") -> str:
    """Stable identity of an alert: the same scope always lands in the same slot."""
    return hashlib.sha1(f"{fabric}\x1f{kind}\x1f{key}\x1f{run}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Slot:
    """The current state of one fingerprint."""

    kind: str
    key: str
    state: State
    active_since_ns: int
    last_true_ns: int
    condition: Condition


@dataclass(frozen=True)
class Transition:
    """A state change — stored as a row, and what notifications are made from."""

    fingerprint: str
    kind: str
    key: str
    from_state: State
    to_state: State
    ts_ns: int
    active_since_ns: int
    condition: Condition


def advance(
    slots: Mapping[str, Slot],
    conds: Iterable[Condition],
    now_ns: int,
    *,
    fabric: str,
    run: str = "",
    config: Mapping[str, LifecycleConfig] = DEFAULT_LIFECYCLE,
) -> tuple[dict[str, Slot], list[Transition]]:
    """One evaluation: returns the new slots and the transitions that happened at ``now_ns``."""
    out: dict[str, Slot] = {}
    changes: list[Transition] = []
    seen: set[str] = set()
    for cond in conds:
        fp = fingerprint(fabric, cond.kind, cond.key, run)
        if fp in seen:
            continue
        seen.add(fp)
        cfg = config.get(cond.kind, LifecycleConfig())
        old = slots.get(fp)
        if old is None or old.state in ("inactive", "resolved"):
            slot = Slot(cond.kind, cond.key, "pending", now_ns, now_ns, cond)
            changes.append(Transition(fp, cond.kind, cond.key, "inactive", "pending", now_ns, now_ns, cond))
        else:
            slot = Slot(cond.kind, cond.key, old.state, old.active_since_ns, now_ns, cond)
        if slot.state == "pending" and now_ns - slot.active_since_ns >= cfg.for_s * 1e9:
            slot = Slot(cond.kind, cond.key, "firing", slot.active_since_ns, now_ns, cond)
            changes.append(
                Transition(fp, cond.kind, cond.key, "pending", "firing", now_ns, slot.active_since_ns, cond)
            )
        out[fp] = slot
    for fp, old in slots.items():
        if fp in seen or old.state in ("inactive", "resolved"):
            continue
        cfg = config.get(old.kind, LifecycleConfig())
        if old.state == "pending":
            changes.append(
                Transition(
                    fp, old.kind, old.key, "pending", "inactive", now_ns, old.active_since_ns, old.condition
                )
            )
        elif now_ns - old.last_true_ns >= cfg.keep_firing_s * 1e9:
            changes.append(
                Transition(
                    fp, old.kind, old.key, "firing", "resolved", now_ns, old.active_since_ns, old.condition
                )
            )
        else:
            out[fp] = old  # keep firing: the condition blinked, not resolved yet
    return out, changes
