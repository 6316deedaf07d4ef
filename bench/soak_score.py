"""Scoring a soak run (pure functions, unit-tested in tests/bench/test_soak_score.py): lost ticks
in the frames written, moving-incast recall and precision against the twin's hotspot truth, false
alerts in balanced stretches, takeover times after worker kills, and p95 of page times.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

NS = 1_000_000_000


@dataclass(frozen=True)
class TickCount:
    expected: int  # ticks between the first and the last frame, outside excluded spans
    missing: int  # of those, ticks with no frame at all
    no_data: int  # ticks whose frame has no data on any port
    missing_ts: tuple[int, ...]  # the first few missing ticks (ns), for the report


def lost_ticks(
    frames: Iterable[tuple[int, bool]], interval_ns: int, *, exclude: Sequence[tuple[int, int]] = ()
) -> TickCount:
    """``frames`` = (tick ts ns, has data); every tick from the first to the last frame is
    expected once, except those inside an ``exclude`` span (a Redis outage: nothing can be written)."""
    seen: dict[int, bool] = {}
    for ts, has in frames:
        tick = round(ts / interval_ns)
        seen[tick] = seen.get(tick, False) or has
    if not seen:
        return TickCount(0, 0, 0, ())
    lo, hi = min(seen), max(seen)
    spans = [(math.floor(a / interval_ns), math.ceil(b / interval_ns)) for a, b in exclude]
    expected = missing = no_data = 0
    first_missing: list[int] = []
    for t in range(lo, hi + 1):
        if any(a <= t <= b for a, b in spans):
            continue
        expected += 1
        if t not in seen:
            missing += 1
            if len(first_missing) < 10:
                first_missing.append(t * interval_ns)
        elif not seen[t]:
            no_data += 1
    return TickCount(expected, missing, no_data, tuple(first_missing))


@dataclass(frozen=True)
class Stretch:
    """The twin's hot GPU over [start, end] (−1: a balanced stretch), with its leaf port."""

    start_ns: int
    end_ns: int
    hot_gpu: int
    port: str
    # every EP group's port facing its hot GPU (a job of several groups has the same hot expert in
    # each: twin/truth.py), group 0's first; empty: ``port`` alone
    ports: tuple[str, ...] = ()


def merge_stretches(raw: Iterable[dict[str, object]], *, gap_ns: int = NS // 2) -> list[Stretch]:
    """Hotspot stretches from repeated /hotspots answers (overlapping windows), merged in time:
    the same hot GPU again within ``gap_ns`` of a stretch's end is that stretch going on. Pass at
    least the job's step gap (its backward pass: no all-to-all, so no phase event): at the scale
    bench's 2 s gap, two answers' pieces of one hotspot were left apart, and a hotspot hot for a
    minute became per-step stretches of 0.4-3 s whose "migrations" the dwell rule then dropped."""
    out: list[Stretch] = []
    for s in sorted(raw, key=lambda d: int(d["start_ns"])):  # type: ignore[call-overload]
        cur = Stretch(int(s["start_ns"]), int(s["end_ns"]), int(s["hot_gpu"]), str(s["port"]),  # type: ignore[call-overload]
                      tuple(map(str, s.get("ports") or ())))  # type: ignore[call-overload]
        if out and out[-1].hot_gpu == cur.hot_gpu and cur.start_ns <= out[-1].end_ns + gap_ns:
            out[-1] = replace(out[-1], end_ns=max(out[-1].end_ns, cur.end_ns))
        else:
            out.append(cur)
    return out


@dataclass(frozen=True)
class Migration:
    ts_ns: int
    from_port: str
    to_port: str
    to_ports: tuple[str, ...] = ()  # every group's new hot port (``Stretch.ports``); empty: to_port

    def lands_in(self, ports: tuple[str, ...]) -> bool:
        """A detection naming ``ports`` found this migration: its new hot port, in any group."""
        return any(p in ports for p in (self.to_ports or (self.to_port,)))


def true_migrations(stretches: Sequence[Stretch], min_dwell_ns: int) -> list[Migration]:
    """The hotspot moved from one hot GPU to another, each staying at least ``min_dwell_ns`` (a
    1 s poll cannot see a hotspot that lived a fraction of a poll; those are not counted either way).

    A hotspot stays until the next stretch starts, not only while its phase events last: between a
    step's all-to-alls and the next step's the fabric carries none of the job's traffic, so nothing
    takes its place (a one-step hotspot of a job with a 2 s backward pass has 0.4 s of events and
    owns every poll of the next 2.4 s); a hotspot replaced within a fraction of a poll still counts
    as short. The last stretch stays until its end.

    A short stretch between two that held is passed over, not a wall: a → b (300 ms) → c is the
    hotspot moving from a to c, at c's start — what a poll can see, and what the product rightly
    reports (the soak scored its detection of c as wrong while counting no move to find). A
    balanced stretch that held (no hot GPU) ends the chain: what follows is an onset."""
    held = [b.start_ns - a.start_ns for a, b in itertools.pairwise(stretches)]
    held += [stretches[-1].end_ns - stretches[-1].start_ns] if stretches else []
    out: list[Migration] = []
    last: Stretch | None = None  # the last stretch that held, while no balanced one came after it
    for s, h in zip(stretches, held, strict=True):
        if h < min_dwell_ns:
            continue
        if s.hot_gpu < 0:
            last = None
            continue
        if last is not None and last.hot_gpu != s.hot_gpu:
            out.append(Migration(s.start_ns, last.port, s.port, s.ports))
        last = s
    return out


@dataclass(frozen=True)
class Detection:
    ts_ns: int
    ports: tuple[str, ...]


@dataclass(frozen=True)
class Recall:
    migrations: int
    detected: int  # migrations with a detected migration to their port within the tolerance
    detections: int  # detected migrations (trajectory steps after an episode's first)
    correct: int  # detections that match a true migration

    @property
    def recall(self) -> float:
        return self.detected / self.migrations if self.migrations else math.nan

    @property
    def precision(self) -> float:
        return self.correct / self.detections if self.detections else math.nan


def score_migrations(
    truth: Sequence[Migration], detections: Sequence[Detection], tolerance_ns: int, *,
    judged: Sequence[tuple[int, int]] = (),
) -> Recall:
    """A true migration is detected when a detection names its new port at most ``tolerance_ns``
    after it (two windows); a detection is correct when it names a true migration's new port within
    that time after one. Detections outside the ``judged`` spans (e.g. warm-up) are not scored."""
    def inside(ts: int) -> bool:
        return not judged or any(a <= ts <= b for a, b in judged)

    truth = [m for m in truth if inside(m.ts_ns)]
    dets = [d for d in detections if inside(d.ts_ns)]
    detected = sum(any(m.lands_in(d.ports) and 0 <= d.ts_ns - m.ts_ns <= tolerance_ns for d in dets)
                   for m in truth)
    correct = sum(any(m.lands_in(d.ports) and 0 <= d.ts_ns - m.ts_ns <= tolerance_ns for m in truth)
                  for d in dets)
    return Recall(len(truth), detected, len(dets), correct)


def without(span: tuple[int, int], holes: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``span`` minus every hole (sorted, merged): the parts of a run that are judged."""
    out, lo = [], span[0]
    for a, b in sorted(holes):
        if b < lo:
            continue
        if a > lo:
            out.append((lo, min(a, span[1])))
        lo = max(lo, b)
        if lo >= span[1]:
            break
    if lo < span[1]:
        out.append((lo, span[1]))
    return [(a, b) for a, b in out if b > a]


def balanced_spans(stretches: Sequence[Stretch], grace_ns: int) -> list[tuple[int, int]]:
    """Balanced stretches minus a grace at their start (a firing alert may take its keep-firing
    time to resolve, and a window straddles the change): no alert may *fire* inside these."""
    return [(s.start_ns + grace_ns, s.end_ns) for s in stretches
            if s.hot_gpu < 0 and s.end_ns - s.start_ns > grace_ns]


def false_alerts(fired: Iterable[tuple[str, int]], spans: Sequence[tuple[int, int]]) -> list[tuple[str, int]]:
    """Alerts (kind, fired at ns) that fired inside a balanced span."""
    return [(k, t) for k, t in fired if any(a <= t <= b for a, b in spans)]


def p95(values: Sequence[float]) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def watching_from_ns(frame_detail: Sequence[tuple[int, dict[str, int]]], n_ports: int,
                     share: float = 0.95) -> int | None:
    """The first frame in which collection covered the fabric (``share`` of its ports filled by any
    metric): before it the product cannot see a hotspot, let alone where it moved from. At 16,896
    ports the collectors bring 184 gNMI streams up over the first ~25 s, with frames of no data in
    between, and the twin's first migration fell in that gap in 2 of 4 runs. None: never."""
    for ts, filled in frame_detail:
        if max(filled.values(), default=0) >= share * n_ports:
            return int(ts)
    return None


def first_alert_delay_s(truth: Sequence[Migration], fired_ns: Iterable[int]) -> float:
    """Seconds from the twin's first migration to the first moving-incast alert firing (0 when it
    fired before: a faster hop the truth does not count); NaN when there was no migration or no alert."""
    times = sorted(fired_ns)
    if not truth or not times:
        return math.nan
    return max(0.0, (times[0] - truth[0].ts_ns) / NS)


@dataclass(frozen=True)
class Naming:
    attributed: int  # incast-family alerts whose culprit names a run
    named: int  # … of which the culprit also names the (layer,) phase
    unreported: int = 0  # … of which the run had reported no events for the alert's time at all

    @property
    def share(self) -> float:
        """Named among those the job's own events could name (a sampling job's silent stretches
        cannot be, and the product says so on the alert instead of guessing)."""
        nameable = self.attributed - self.unreported
        return self.named / nameable if nameable > 0 else math.nan

    @property
    def share_all(self) -> float:
        return self.named / self.attributed if self.attributed else math.nan


def culprit_naming(alerts: Iterable[tuple[str, int, str, str, bool]], span: tuple[int, int]) -> Naming:
    """Of the incast-family alerts (kind, fired ns, culprit run, culprit phase, run reported events
    for the alert's time) fired inside ``span``: those attributed to a run, of these the ones whose
    phase is named too, and the unnamed ones for whose time the run had reported nothing."""
    judged = [(run, phase, reported) for kind, ts, run, phase, reported in alerts
              if kind in ("incast", "moving_incast") and span[0] <= ts <= span[1]]
    attributed = [(phase, reported) for run, phase, reported in judged if run]
    return Naming(len(attributed), sum(1 for p, _ in attributed if p),
                  sum(1 for p, reported in attributed if not p and not reported))
