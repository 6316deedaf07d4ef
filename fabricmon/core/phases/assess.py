"""One run's phase-aligned views (projected, attributed, measured), each built with its gates.

``assess`` is what the phases app calls per update: it gates the projection against the counters,
fits the attribution (with the projection as prior once it passed), and measures each phase's
interval; a view whose gates fail is withheld (no values), never drawn as if it were true::

    projected   coverage · projected_vs_measured (or "unverified": no counters, or counters that
                are not the run's)                          — never clocks: a projection has none
    attributed  clock · clock_noise · counters_of_run · poll_vs_phase · attribution_residual
                (prior = projection once it shows)
    measured    clock · clock_noise · counters_of_run · poll_resolution

The clock gates judge the *systematic* error (skew, drift) against the poll interval, and the
noise around it apart (``clocks.py``); ``counters_of_run`` compares the run's projected bytes with
the counters on its NICs' leaf ports, so counters that are mostly other traffic never show as
the run's measured or attributed view.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from fabricmon.core.phases.attribution import HotPorts, margin_hot_ports
from fabricmon.core.phases.attribution_fit import AttributionSums, attribute
from fabricmon.core.phases.gates import (
    PRIOR_REL_ERROR_FLOOR,
    Gate,
    StepCoverage,
    ViewVerdict,
    check,
    clock_gate,
    clock_noise_gate,
    coverage_gate,
    failing,
    poll_gate,
    projected_vs_measured,
    projection_gate,
    residual_gate,
    run_share,
    run_share_gate,
    step_coverage,
    unverified_projection_gate,
    view_verdict,
)
from fabricmon.core.phases.timeline import PhaseTimeline

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Column = tuple[int, int, str]  # (step, layer, phase)


@dataclass(frozen=True)
class AttributionInput:
    """What the attribution of one run's phases is fitted on: the phase timeline, which steps the
    run reported, and the counters with the intervals that hold unreported steps set to NaN
    (dropped by the fit, like failed polls). Built once per update by whoever calls ``assess``."""

    timeline: PhaseTimeline
    steps: StepCoverage
    measured: FloatArray  # (intervals, 2·ports) in | out bytes


def attribution_input(
    phase_keys: Sequence[Column], start_ns: npt.ArrayLike, end_ns: npt.ArrayLike, *,
    edges_ns: npt.ArrayLike, measured_in: FloatArray, measured_out: FloatArray,
) -> AttributionInput:
    windows = zip(phase_keys, np.asarray(start_ns), np.asarray(end_ns), strict=True)
    timeline = PhaseTimeline.from_events([(k[0], k[1], k[2], int(s), int(e)) for k, s, e in windows])
    steps = step_coverage([k[0] for k in phase_keys], start_ns, end_ns, edges_ns)
    meas = np.hstack([measured_in, measured_out])
    if steps.gap_intervals.any():
        meas = np.where(steps.gap_intervals[:, None], np.nan, meas)
    return AttributionInput(timeline, steps, meas)


@dataclass(frozen=True)
class SourceView:
    """One source of the phase-aligned heatmap (measured | projected | attributed) and its gates."""

    source: str
    verdict: ViewVerdict
    gates: tuple[Gate, ...]
    columns: tuple[tuple[int, int, str], ...]  # (step, layer, phase); step −1 = folded over steps
    load_bytes: FloatArray | None  # (columns, ports), or None when withheld
    # attributed view: what the split rests on ("counters" | "counters + projection"); every view:
    # the per-column hot port with its margin (exact views) or confidence (attributed), claimed or
    # ambiguous, and its direction (core.phases.attribution.HotPorts)
    basis: str = ""
    hot: HotPorts | None = None

    def as_dict(self, with_values: bool = True, rows: list[int] | None = None) -> dict[str, Any]:
        """JSON-ready. ``rows``: the port positions whose values are sent (``rows.shown_ports``,
        sorted; None: every port); ``hot_port`` and the claims name ports by position either way."""
        load = self.load_bytes if self.verdict != "withhold" else None
        shown = load is not None
        return {
            "basis": self.basis or None,
            "hot": self.hot.as_dict() if shown and self.hot is not None else None,
            "source": self.source,
            "verdict": self.verdict,
            "gates": [g.as_dict() for g in self.gates],
            "failed": [g.reason for g in failing(self.gates)],
            "columns": [list(c) for c in self.columns],
            # whole bytes: a fraction of a byte means nothing, and integers are half the JSON
            "values": (json_rows(take_rows(load, rows), whole=True)
                       if load is not None and with_values else None),
            "hot_port": hot_ports(load) if load is not None and load.size else None,
        }


def take_rows(load: FloatArray, rows: list[int] | None) -> FloatArray:
    """The ports ``rows`` names of (columns, ports) values (``rows.shown_ports``: sorted and unique,
    so as many as there are ports is every port, not copied); None: every port."""
    return load if rows is None or len(rows) == load.shape[1] else load[:, rows]


def json_rows(a: npt.ArrayLike, *, whole: bool = False) -> list[list[float | int | None]]:
    """Rows of values for JSON: NaN (no data: a failed poll, a phase outside the counters) is
    None, never NaN (invalid JSON) nor a cast integer; ``whole`` rounds to whole bytes."""
    arr = np.asarray(a, dtype=np.float64)
    ok = np.isfinite(arr)
    vals = np.rint(np.where(ok, arr, 0.0)).astype(np.int64) if whole else arr
    filled = np.where(ok, vals, 0)
    if ok.all():
        return cast("list[list[float | int | None]]", filled.tolist())
    # gaps: None put in by numpy through an object array (a per-value Python loop over the rows
    # with a gap was two thirds of a live view's answer when no-data ticks left gaps in most rows)
    obj = filled.astype(object)
    obj[~ok] = None
    return cast("list[list[float | int | None]]", obj.tolist())


def hot_ports(a: npt.ArrayLike) -> list[int | None]:
    """Per row, the index of its largest value ignoring NaN (None when the row has no data)."""
    arr = np.asarray(a, dtype=np.float64)
    has = np.asarray(np.isfinite(arr).any(axis=1), dtype=np.bool_).tolist()
    best: list[int] = np.argmax(np.where(np.isfinite(arr), arr, -np.inf), axis=1).tolist()
    return [b if h else None for b, h in zip(best, has, strict=True)]


@dataclass(frozen=True)
class _Counters:
    """The run's counters: poll edges, (intervals, ports) bytes in and out, and the fit's input."""

    edges: IntArray
    measured_in: FloatArray
    measured_out: FloatArray
    prepared: AttributionInput
    measured_both: FloatArray  # (intervals, 2·ports): in | out, what the gates compare (built once)


def assess(
    *,
    phase_keys: list[Column],
    start_ns: npt.ArrayLike,
    end_ns: npt.ArrayLike,
    projected_in: FloatArray,
    projected_out: FloatArray,
    coverage: float,
    missing_ranks: npt.ArrayLike = (),
    placement_problems: tuple[str, ...] = (),
    clock_error_s: float,
    offset_known: bool,
    edges_ns: npt.ArrayLike | None,
    measured_in: FloatArray | None,
    measured_out: FloatArray | None,
    attribution_sums: AttributionSums | None = None,
    prepared: AttributionInput | None = None,
    clock_noise_s: float = 0.0,
    nic_ports: npt.ArrayLike | None = None,
) -> dict[str, SourceView]:
    """Gate and build the three views of a run's phases.

    ``projected_*`` are (phases, ports) bytes from the projection; ``measured_*`` (intervals,
    ports) bytes between poll ``edges_ns`` (None: no counters for the run's time).
    ``clock_error_s``: the systematic clock error (skew, drift), ``clock_noise_s`` the scatter
    around it (``clocks.ClockAlignment``). ``nic_ports``: the leaf ports of the run's NICs (what
    ``counters_of_run`` sums over; default: every port the projection puts bytes on).
    ``attribution_sums`` (an :class:`AttributionSums` over exactly these intervals and phase
    windows, in/out columns as ``hstack([measured_in, measured_out])``): the attribution is solved
    from them instead of refitted over every interval — what a live run's update passes, with the
    ``prepared`` input (``attribution_input`` of the same arguments) it built them from.
    """
    start = np.asarray(start_ns, dtype=np.int64)
    end = np.asarray(end_ns, dtype=np.int64)
    phase_s = float(np.median(end - start)) / 1e9 if len(start) else math.nan
    cols = tuple(phase_keys)
    counters = None
    if edges_ns is not None and measured_in is not None and measured_out is not None:
        edges = np.asarray(edges_ns, dtype=np.int64)
        counters = _Counters(edges, measured_in, measured_out, prepared or attribution_input(
            cols, start, end, edges_ns=edges, measured_in=measured_in, measured_out=measured_out),
            np.hstack([measured_in, measured_out]))
    # in | out side by side, as the gates and the prior read them (one copy, not one per reader)
    projected_both = np.hstack([projected_in, projected_out])
    share = None
    if counters is not None:
        share = _share_gate(counters, start, end, projected_both=projected_both, nic_ports=nic_ports)
    cover = coverage_gate(coverage, np.asarray(missing_ranks, dtype=np.int64).tolist(), placement_problems)
    projected, rel = _projected_view(cols, start=start, end=end, projected_in=projected_in,
                                     projected_out=projected_out, projected_both=projected_both,
                                     gates=[cover], counters=counters, share=share)
    views = {"projected": projected}
    if counters is not None and share is not None:
        poll_s = float(np.median(np.diff(counters.edges))) / 1e9
        clocks = (clock_gate(clock_error_s, offset_known, poll_s), clock_noise_gate(clock_noise_s, poll_s),
                  share)
        # the projection is the attribution's prior only where it passed every gate
        prior_error = max(rel, PRIOR_REL_ERROR_FLOOR) if projected.verdict == "show" else None
        views["attributed"] = _attributed_view(
            counters, cols, projected_in=projected_in, projected_both=projected_both, clock=clocks,
            phase_s=phase_s, prior_error=prior_error, sums=attribution_sums)
        views["measured"] = _measured_view(cols, start=start, end=end, counters=counters, clock=clocks,
                                           phase_s=phase_s)
    return views


def _share_gate(
    counters: _Counters, start: IntArray, end: IntArray, *, projected_both: FloatArray,
    nic_ports: npt.ArrayLike | None,
) -> Gate:
    """``counters_of_run`` over the run's NIC ports, in and out, in the intervals the projection
    is compared in (inside the phases, no unreported steps)."""
    p = projected_both.shape[1] // 2  # in | out
    if nic_ports is None:
        used = np.asarray((projected_both > 0).any(axis=0))
        ports = np.flatnonzero(used[:p] | used[p:])
    else:
        ports = np.unique(np.asarray(nic_ports, dtype=np.int64))
        ports = ports[(ports >= 0) & (ports < p)]
    both = np.concatenate([ports, ports + p])
    value, pb, mb = run_share(start, end, projected_both, counters.edges, counters.measured_both, ports=both,
                              skip=counters.prepared.steps.gap_intervals)
    return run_share_gate(value, pb, mb, len(ports))


def _projected_view(
    cols: tuple[Column, ...], *, start: IntArray, end: IntArray, projected_in: FloatArray,
    projected_out: FloatArray, projected_both: FloatArray, gates: list[Gate], counters: _Counters | None,
    share: Gate | None,
) -> tuple[SourceView, float]:
    """The projection, compared with the counters of the intervals inside the run's phases (those
    with unreported steps carry bytes no phase explains: left out). Counters that are not the
    run's (``share`` withholds) cannot verify it: unverified, not failed. Returns it and its error."""
    rel = math.nan
    if counters is None:
        gates.append(unverified_projection_gate("no counters for the run's time"))
    elif share is not None and share.verdict == "withhold":
        gates.append(unverified_projection_gate(
            "the counters on the run's ports are not the run's traffic (" + share.reason + ")"))
    else:
        steps = counters.prepared.steps
        rel = projected_vs_measured(start, end, projected_both, counters.edges, counters.measured_both,
                                    skip=steps.gap_intervals)
        if math.isnan(rel) and steps.fraction < 1.0:
            gates.append(unverified_projection_gate(
                f"the run reports {steps.reported} of {steps.span} steps and no poll interval lies "
                "between consecutively reported steps"))
        else:
            gates.append(projection_gate(rel))
    v = view_verdict(gates)
    load = np.maximum(projected_in, projected_out)
    hot = margin_hot_ports(cols, projected_in, projected_out) if v != "withhold" else None
    return SourceView("projected", v, tuple(gates), cols, load if v != "withhold" else None, hot=hot), rel


def _prior(
    cols: tuple[Column, ...], keys: Sequence[tuple[int, str]], projected: FloatArray
) -> FloatArray | None:
    """Mean projected bytes per (layer, phase) key over the projected columns; None when a key the
    fit splits into has no projected column (then the counters alone decide)."""
    where = {k: i for i, k in enumerate(keys)}
    idx = np.array([where.get((c[1], c[2]), -1) for c in cols], dtype=np.int64)
    counts = np.bincount(idx[idx >= 0], minlength=len(keys))
    if not len(keys) or (counts == 0).any():
        return None
    prior = np.zeros((len(keys), projected.shape[1]))
    np.add.at(prior, idx[idx >= 0], projected[idx >= 0])
    return prior / counts[:, None]


def _attributed_view(
    counters: _Counters, cols: tuple[Column, ...], *, projected_in: FloatArray, projected_both: FloatArray,
    clock: tuple[Gate, ...], phase_s: float, prior_error: float | None, sums: AttributionSums | None,
) -> SourceView:
    """Counters split over the run's (layer, phase) keys.

    1 s counters fix each port's bytes per step but barely the split between phases (see
    docs/phases.md): where the projection has passed every gate against those counters
    (``prior_error`` given), its per-(layer, phase) pattern is the prior, trusted to its measured
    error (≥ 1 %: the gate checks 1 s sums, not single phases); otherwise counters alone, whose hot
    ports the confidence then mostly leaves unclaimed."""
    inp = counters.prepared
    tl, steps = inp.timeline, inp.steps
    # the prior per (layer, phase): the projected columns' mean (the columns may be a window of
    # the instances the counters are split over: the pattern per key is what carries over)
    prior = None
    if prior_error is not None:
        prior = _prior(cols, tl.keys, projected_both)
    if prior is None:
        prior_error = None
    trust = prior_error if prior_error is not None else PRIOR_REL_ERROR_FLOOR
    if sums is not None:
        att = sums.aligned(tl.keys).solve(prior=prior, prior_rel_error=trust)
    else:
        att = attribute(tl, counters.edges, inp.measured, prior=prior, prior_rel_error=trust)
    p = projected_in.shape[1]
    poll_s = float(np.median(np.diff(counters.edges))) / 1e9
    sampled = f"{steps.reported} of {steps.span}" if steps.fraction < 1 else ""
    gates = (
        *clock,
        poll_gate(poll_s, phase_s, att.intervals, len(tl.keys), sampled),
        residual_gate(att.residual_rel if att.intervals else math.nan),  # nothing fitted: unknown
    )
    v = view_verdict(gates)
    return SourceView("attributed", v, gates, tuple((-1, k[0], k[1]) for k in tl.keys),
                      att.load(p) if v != "withhold" else None,
                      basis="counters + projection" if prior is not None else "counters",
                      hot=att.hot_ports(p))


def _measured_view(
    cols: tuple[Column, ...], *, start: IntArray, end: IntArray, counters: _Counters, clock: tuple[Gate, ...],
    phase_s: float,
) -> SourceView:
    """Each phase column gets its poll interval's mean rate over the phase's window."""
    edges = counters.edges
    mid = (start + end) // 2
    i = np.clip(np.searchsorted(edges, mid, side="right") - 1, 0, len(edges) - 2)
    dt = np.diff(edges).astype(np.float64)
    dur = (end - start).astype(np.float64)
    frac = (dur / dt[i])[:, None]
    b_in, b_out = counters.measured_in[i] * frac, counters.measured_out[i] * frac
    # a phase outside the counters' span has no measurement: NaN (no data), never the nearest poll
    outside = (mid < edges[0]) | (mid >= edges[-1])
    b_in[outside] = np.nan
    b_out[outside] = np.nan
    load = np.maximum(b_in, b_out)
    poll_s = float(np.median(dt)) / 1e9
    resolution = check(
        "poll_resolution", "each poll interval holds at most one phase, so a column is that phase",
        poll_s / phase_s if phase_s > 0 else math.nan, flag_bound=1.0, withhold_bound=math.inf,
        unit="phases/poll",
    )
    gates = (*clock, resolution)
    v = view_verdict(gates)
    hot = margin_hot_ports(cols, b_in, b_out) if v != "withhold" else None
    return SourceView("measured", v, gates, cols, load if v != "withhold" else None, hot=hot)
