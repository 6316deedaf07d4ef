"""When a notification group speaks — Alertmanager's aggregation-group timers and dedup stage as
pure functions over plain values (no Django, no clock: every function takes ``now`` in seconds),
and the delivery retry's backoff with full jitter (the jitter source passed in).

One group's life (docs/alerts.md)::

    first alert ─ group_wait ─▶ flush ─ group_interval ─▶ flush ─ group_interval ─▶ flush …
                                  │                         │
              sends if the firing set is new (not ⊆ the last notification's), if resolved alerts are
              new and send_resolved, if every alert resolved after a firing notification — else only
              once repeat_interval has passed since the last notification (so a repeat falls on the
              first tick after it); resolved alerts leave the group at each flush; an empty group
              stops ticking, and its next alert starts a new group_wait.

Alertmanager: https://prometheus.io/docs/alerting/latest/configuration/#route and its
``dispatch/dispatch.go`` (aggregation groups) and ``notify/notify.go`` (``DedupStage.needsUpdate``).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

# The labels every alert carries (the transports send the same): group_by picks among them.
LABELS = ("alertname", "fabric", "scope", "run")
ALL_LABELS = "..."  # Alertmanager's "group by every label": one group per alert
DEFAULT_GROUP_BY = ("fabric", "alertname")
DEFAULT_GROUP_WAIT_S = 30.0
DEFAULT_GROUP_INTERVAL_S = 300.0
DEFAULT_REPEAT_INTERVAL_S = 4 * 3600.0
MAX_INTERVAL_S = 30 * 86400.0  # a sanity bound: nobody means a 40-day repeat

# Alertmanager's <duration>: ((([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?
# (([0-9]+)s)?(([0-9]+)ms)?|0) — Prometheus' model.ParseDuration.
_UNITS = (("y", 365 * 86400.0), ("w", 7 * 86400.0), ("d", 86400.0), ("h", 3600.0), ("m", 60.0),
          ("s", 1.0), ("ms", 0.001))
_DURATION = re.compile("".join(rf"(?:(\d+){u})?" for u, _ in _UNITS))


def parse_duration(text: str) -> float:
    """``"30s"``, ``"5m"``, ``"1h30m"``, ``"1s500ms"``, ``"0"`` → seconds; ValueError otherwise."""
    raw = text.strip()
    if raw == "0":
        return 0.0
    found = _DURATION.fullmatch(raw)
    if not raw or found is None:
        raise ValueError(f"{text!r} is not a duration (write it like 30s, 5m, 4h or 1h30m)")
    return sum(int(n) * scale for n, (_, scale) in zip(found.groups(), _UNITS, strict=True) if n)


def format_duration(seconds: float) -> str:
    """The shortest Alertmanager duration for ``seconds`` (``300.0`` → ``"5m"``)."""
    left = round(seconds * 1000)
    if left <= 0:
        return "0"
    out = ""
    for unit, scale in _UNITS:
        n, left = divmod(left, round(scale * 1000))
        out += f"{n}{unit}" if n else ""
    return out


def clean_group_by(names: Iterable[str]) -> tuple[str, ...]:
    """Label names to group by, checked: known labels, no repeats, ``...`` only alone."""
    out = tuple(str(n).strip() for n in names if str(n).strip())
    if ALL_LABELS in out and len(out) > 1:
        raise ValueError("'...' (group by every label) cannot be combined with other labels")
    unknown = [n for n in out if n not in (*LABELS, ALL_LABELS)]
    if unknown:
        raise ValueError(f"unknown label {unknown[0]!r}: alerts carry {', '.join(LABELS)} (or '...' for all)")
    if len(set(out)) != len(out):
        raise ValueError("a label is named twice")
    return out


@dataclass(frozen=True)
class GroupTiming:
    """A receiver's route settings: how its alerts are grouped and when a group is sent."""

    group_by: tuple[str, ...] = DEFAULT_GROUP_BY
    group_wait_s: float = DEFAULT_GROUP_WAIT_S
    group_interval_s: float = DEFAULT_GROUP_INTERVAL_S
    repeat_interval_s: float = DEFAULT_REPEAT_INTERVAL_S
    send_resolved: bool = True

    def problems(self) -> dict[str, str]:
        """Field → what is wrong with it (empty: valid). Alertmanager's rules: group_wait may be 0,
        group_interval and repeat_interval may not."""
        out: dict[str, str] = {}
        try:
            clean_group_by(self.group_by)
        except ValueError as exc:
            out["group_by"] = str(exc)
        zero_allowed = (("group_wait_s", True), ("group_interval_s", False), ("repeat_interval_s", False))
        for name, zero_ok in zero_allowed:
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                out[name] = "must be a duration of 0 or more"
            elif value == 0 and not zero_ok:
                out[name] = f"{name.removesuffix('_s')} cannot be zero"
            elif value > MAX_INTERVAL_S:
                out[name] = f"at most {MAX_INTERVAL_S / 86400:g} days"
        return out


def group_labels(labels: Mapping[str, str], group_by: Iterable[str]) -> dict[str, str]:
    """The labels that name an alert's group: those of ``group_by`` (a missing one is empty, as in
    Alertmanager), or every label for ``...``; ``()`` puts every alert in one group."""
    names = tuple(group_by)
    if names == (ALL_LABELS,):
        return dict(sorted(labels.items()))
    return {n: labels.get(n, "") for n in sorted(names)}


def group_key(labels: Mapping[str, str]) -> str:
    """Alertmanager's group key form, ``{}:{alertname="incast", fabric="su1"}``."""
    pairs = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{{}}:{{{pairs}}}"


def group_id(labels: Mapping[str, str]) -> str:
    """A short stable id of a group key (the database column: keys may be long)."""
    return hashlib.sha256(group_key(labels).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class GroupState:
    """What a group remembers between flushes: its timer and its notification log entry."""

    next_flush_s: float | None = None  # None: the group holds no alerts (it is not ticking)
    notified_s: float | None = None  # when it last notified (None: never)
    notified_firing: frozenset[str] = frozenset()
    notified_resolved: frozenset[str] = frozenset()


def admit(state: GroupState, now_s: float, timing: GroupTiming) -> GroupState:
    """An alert enters or changes in the group: a group that was not ticking starts its group_wait;
    a ticking one sends the change at its next tick (group_interval after the last)."""
    if state.next_flush_s is not None:
        return state
    return GroupState(now_s + timing.group_wait_s, state.notified_s, state.notified_firing,
                      state.notified_resolved)


def needs_update(state: GroupState, firing: frozenset[str], resolved: frozenset[str], now_s: float,
                 timing: GroupTiming) -> bool:
    """Alertmanager's ``DedupStage.needsUpdate``."""
    if state.notified_s is None:
        return bool(firing)  # never notified: only firing alerts are news
    if not firing <= state.notified_firing:
        return True
    if not firing:
        # Every alert resolved: tell a receiver that was told of firing ones (also without
        # send_resolved, so the log forgets them); alerts that fired and resolved between two
        # ticks were never sent, so there is nothing to take back.
        return bool(state.notified_firing)
    if timing.send_resolved and not resolved <= state.notified_resolved:
        return True
    return state.notified_s <= now_s - timing.repeat_interval_s


@dataclass(frozen=True)
class Flush:
    """One tick of a group: whether to notify, which alerts the notification carries, and the
    group's state afterwards. ``drop`` are the resolved alerts that leave the group now."""

    notify: bool
    send: tuple[str, ...]  # fingerprints in the notification (empty with notify: logged, not sent)
    drop: frozenset[str]
    state: GroupState = field(default_factory=GroupState)


def flush(state: GroupState, firing: frozenset[str], resolved: frozenset[str], now_s: float,
          timing: GroupTiming) -> Flush:
    """The group's timer fired at ``now_s``. Without send_resolved resolved alerts are left out of
    the notification, and one of only resolved alerts is logged but not sent (Alertmanager's
    RetryStage)."""
    notify = needs_update(state, firing, resolved, now_s, timing)
    send: tuple[str, ...] = ()
    after = state
    if notify:
        shown = firing | resolved if timing.send_resolved else firing
        send = tuple(sorted(shown)) if firing or timing.send_resolved else ()
        after = GroupState(state.next_flush_s, now_s, firing, resolved)
    ticking = bool(firing)  # resolved alerts leave now: a group of none stops
    next_s = now_s + timing.group_interval_s if ticking else None
    after = GroupState(next_s, after.notified_s, after.notified_firing, after.notified_resolved)
    return Flush(notify, send, resolved, after)


def retry_bound_s(attempt: int, base_s: float, cap_s: float) -> float:
    """The longest wait before retry ``attempt + 1``: base·2^(attempt−1), capped."""
    return min(cap_s, base_s * 2.0 ** min(max(attempt - 1, 0), 60))


def retry_delay_s(attempt: int, base_s: float, cap_s: float, jitter: Callable[[], float]) -> float:
    """Exponential backoff with full jitter (AWS Architecture Blog, "Exponential Backoff And
    Jitter"): uniform in [0, :func:`retry_bound_s`], so receivers that failed together do not retry
    together. ``jitter()`` returns a number in [0, 1) (``random.random``; a fixed one in tests)."""
    return retry_bound_s(attempt, base_s, cap_s) * min(max(jitter(), 0.0), 1.0)


def default_group_by() -> list[str]:
    """The model field's default (a callable: a JSON list must not be shared between rows)."""
    return list(DEFAULT_GROUP_BY)
