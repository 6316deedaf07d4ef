"""One run's phase-aligned views (projected, attributed, measured), each built with its gates.

``assess`` is what the phases app calls per update: it gates the projection against the counters,
fits the attribution (with the projection as prior once it passed), and measures each phase's
interval; a view whose gates fail is withheld (no values), never drawn as if it were true.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fabricmon.core.phases.gates import (
    PRIOR_REL_ERROR_FLOOR,
    Gate,
    StepCoverage,
    ViewVerdict,
    check,
    clock_gate,
    coverage_gate,
    failing,
    poll_gate,
    projected_vs_measured,
    projection_gate,
    residual_gate,
    step_coverage,
    unverified_projection_gate,
    view_verdict,
)


@dataclass(frozen=True)
class AttributionInput:
    """What the attribution of one run's phases is fitted on: the phase timeline, which steps the
    run reported, and the counters with the intervals that hold unreported steps set to NaN
    (dropped by the fit, like failed polls). Built once per update by whoever calls ``assess``."""

    timeline: Any  # core.phases.timeline.PhaseTimeline
    steps: StepCoverage
    measured: Any  # (intervals, 2·ports) in | out bytes


def attribution_input(
    phase_keys: Any, start_ns: Any, end_ns: Any, *, edges_ns: Any, measured_in: Any, measured_out: Any
) -> AttributionInput:
    import numpy as np  # noqa: PLC0415

    from fabricmon.core.phases.timeline import PhaseTimeline  # noqa: PLC0415

    windows = zip(phase_keys, start_ns, end_ns, strict=True)
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
    load_bytes: Any  # (columns, ports) ndarray, or None when withheld
    # attributed view: what the split rests on ("counters" | "counters + projection") and the
    # per-column hot port with its confidence (core.phases.attribution.HotPorts), claimed or ambiguous
    basis: str = ""
    hot: Any = None

    def as_dict(self, with_values: bool = True) -> dict[str, Any]:
        shown = self.verdict != "withhold" and self.load_bytes is not None
        return {
            "basis": self.basis or None,
            "hot": self.hot.as_dict() if shown and self.hot is not None else None,
            "source": self.source,
            "verdict": self.verdict,
            "gates": [g.as_dict() for g in self.gates],
            "failed": [g.reason for g in failing(self.gates)],
            "columns": [list(c) for c in self.columns],
            "values": self.load_bytes.tolist() if (shown and with_values) else None,
            "hot_port": self.load_bytes.argmax(axis=1).tolist() if shown and self.load_bytes.size else None,
        }


def assess(
    *,
    phase_keys: list[tuple[int, int, str]],
    start_ns: Any,
    end_ns: Any,
    projected_in: Any,
    projected_out: Any,
    coverage: float,
    clock_error_s: float,
    offset_known: bool,
    edges_ns: Any | None,
    measured_in: Any | None,
    measured_out: Any | None,
    attribution_sums: Any | None = None,
    prepared: AttributionInput | None = None,
) -> dict[str, SourceView]:
    """Gate and build the three views of a run's phases.

    ``projected_*`` are (phases, ports) bytes from the projection; ``measured_*`` (intervals,
    ports) bytes between poll ``edges_ns`` (None: no counters for the run's time).
    ``attribution_sums`` (a ``core.phases.attribution_fit.AttributionSums`` over exactly these intervals and
    phase windows, in/out columns as ``hstack([measured_in, measured_out])``): the attribution is
    solved from them instead of refitted over every interval — what a live run's update passes,
    with the ``prepared`` input (``attribution_input`` of the same arguments) it built them from.
    """
    import numpy as np  # noqa: PLC0415  (keeps the gate vocabulary above import-light)

    from fabricmon.core.phases.attribution_fit import attribute  # noqa: PLC0415

    start = np.asarray(start_ns, dtype=np.int64)
    end = np.asarray(end_ns, dtype=np.int64)
    phase_s = float(np.median(end - start)) / 1e9 if len(start) else math.nan
    cols = tuple(phase_keys)
    clock = clock_gate(clock_error_s, offset_known, phase_s)
    cover = coverage_gate(coverage)
    proj_load = np.maximum(projected_in, projected_out)
    views: dict[str, SourceView] = {}
    have_measured = edges_ns is not None and measured_in is not None and measured_out is not None
    proj_gates = [cover, clock]
    if have_measured:
        edges = np.asarray(edges_ns, dtype=np.int64)
        meas = np.hstack([measured_in, measured_out])
        # counters of intervals with unreported steps carry bytes no phase explains: neither
        # compared with the projection nor attributed
        inp = prepared or attribution_input(
            cols, start, end, edges_ns=edges, measured_in=measured_in, measured_out=measured_out
        )
        steps = inp.steps
        rel = projected_vs_measured(start, end, np.hstack([projected_in, projected_out]), edges, meas,
                                    skip=steps.gap_intervals)
        if math.isnan(rel) and steps.fraction < 1.0:
            proj_gates.append(unverified_projection_gate(
                f"the run reports {steps.reported} of {steps.span} steps and no poll interval lies "
                "between consecutively reported steps"))
        else:
            proj_gates.append(projection_gate(rel))
    else:
        proj_gates.append(unverified_projection_gate("no counters for the run's time"))
    v = view_verdict(proj_gates)
    views["projected"] = SourceView("projected", v, tuple(proj_gates), cols, proj_load if v != "withhold" else None)

    if have_measured:
        tl = inp.timeline
        # 1 s counters fix each port's bytes per step but barely the split between phases (see
        # docs/phases.md): where the projection has passed every gate against those counters, its
        # per-(layer, phase) pattern is the prior, trusted to its measured error (≥ 1 %: the gate
        # checks 1 s sums, not single phases); otherwise counters alone, whose hot ports the
        # confidence then mostly leaves unclaimed.
        use_prior = v == "show"
        prior = None
        if use_prior:
            prior = np.zeros((len(tl.keys), meas.shape[1]))
            np.add.at(prior, tl.key, np.hstack([projected_in, projected_out]))
            prior /= np.maximum(np.bincount(tl.key, minlength=len(tl.keys)), 1)[:, None]
        prior_error = max(rel, PRIOR_REL_ERROR_FLOOR) if use_prior else PRIOR_REL_ERROR_FLOOR
        if attribution_sums is not None:
            att = attribution_sums.aligned(tl.keys).solve(prior=prior, prior_rel_error=prior_error)
        else:
            att = attribute(tl, edges, inp.measured, prior=prior, prior_rel_error=prior_error)
        p = proj_load.shape[1]
        att_load = att.load(p)
        poll_s = float(np.median(np.diff(edges))) / 1e9
        sampled = f"{steps.reported} of {steps.span}" if steps.fraction < 1 else ""
        att_gates = (
            clock,
            poll_gate(poll_s, phase_s, att.intervals, len(tl.keys), sampled),
            residual_gate(att.residual_rel if att.intervals else math.nan),  # nothing fitted: unknown
        )
        av = view_verdict(att_gates)
        views["attributed"] = SourceView("attributed", av, att_gates, tuple((-1, k[0], k[1]) for k in tl.keys),
                                         att_load if av != "withhold" else None,
                                         basis="counters + projection" if use_prior else "counters",
                                         hot=att.hot_ports(p))
        # measured: each phase column gets its poll interval's mean rate over the phase's window
        mid = (start + end) // 2
        i = np.clip(np.searchsorted(edges, mid, side="right") - 1, 0, len(edges) - 2)
        dt = np.diff(edges).astype(np.float64)
        dur = (end - start).astype(np.float64)
        m_load = np.maximum(measured_in[i], measured_out[i]) * (dur / dt[i])[:, None]
        m_gates = (clock, check("poll_resolution", "each poll interval holds at most one phase, so a column is that phase",
                                poll_s / phase_s if phase_s > 0 else math.nan, flag_bound=1.0, withhold_bound=math.inf,
                                unit="phases/poll"))
        mv = view_verdict(m_gates)
        views["measured"] = SourceView("measured", mv, m_gates, cols, m_load if mv != "withhold" else None)
    return views
