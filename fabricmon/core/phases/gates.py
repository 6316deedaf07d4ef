"""Validation gates: every derived view declares its assumptions and checks them on live data.

A gate is one assumption with the measured value, the bounds and the verdict::

    Gate("clock_alignment", "event clocks agree with the switches' to within a quarter phase",
         value=0.5 s, flag_above=…, withhold_above=…)  →  verdict "withhold", reason "… 0.5 s > …"

A view takes the worst verdict of its gates: ``show`` when all pass, ``flag`` (drawn, with a
warning) or ``withhold`` (not drawn at all — the page and API say which gate failed and by how
much). A failing gate revokes the view; nothing is ever drawn as if it were true.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from fabricmon.core.phases.intervals import interval_bytes

Verdict = Literal["pass", "flag", "withhold"]
ViewVerdict = Literal["show", "flag", "withhold"]
_ORDER = {"pass": 0, "flag": 1, "withhold": 2}
_VIEW: tuple[ViewVerdict, ...] = ("show", "flag", "withhold")


@dataclass(frozen=True)
class Gate:
    """One checked assumption of a view."""

    name: str
    assumption: str
    value: float
    unit: str
    flag_bound: float
    withhold_bound: float
    higher_is_better: bool
    verdict: Verdict
    reason: str

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("value", "flag_bound", "withhold_bound"):
            v = d[k]
            d[k] = None if isinstance(v, float) and not math.isfinite(v) else v
        return d


def _fmt(x: float, unit: str) -> str:
    if not math.isfinite(x):
        return "unknown"
    if unit == "s":
        return f"{x * 1e3:.3g} ms" if abs(x) < 1 else f"{x:.3g} s"
    if unit == "ratio":
        return f"{x * 100:.3g} %"
    return f"{x:.3g}{(' ' + unit) if unit else ''}"


def check(
    name: str,
    assumption: str,
    value: float,
    *,
    flag_bound: float,
    withhold_bound: float,
    unit: str = "",
    higher_is_better: bool = False,
) -> Gate:
    """Compare ``value`` with its bounds. An unknown value (NaN) withholds: not known ≠ fine."""
    if not math.isfinite(value):
        verdict: Verdict = "withhold"
        reason = f"{name}: value unknown — {assumption}"
    else:
        def worse(v: float, b: float) -> bool:
            return v < b if higher_is_better else v > b

        sign = "<" if higher_is_better else ">"
        if worse(value, withhold_bound):
            verdict, bound = "withhold", withhold_bound
        elif worse(value, flag_bound):
            verdict, bound = "flag", flag_bound
        else:
            verdict, bound = "pass", flag_bound
        if verdict == "pass":
            ok = "≥" if higher_is_better else "≤"
            reason = f"{name}: {_fmt(value, unit)} {ok} {_fmt(bound, unit)}"
        else:
            reason = f"{name}: {_fmt(value, unit)} {sign} {_fmt(bound, unit)} — {assumption}"
    return Gate(name, assumption, float(value), unit, float(flag_bound), float(withhold_bound),
                higher_is_better, verdict, reason)


def view_verdict(gates: Iterable[Gate]) -> ViewVerdict:
    worst = max((_ORDER[g.verdict] for g in gates), default=0)
    return _VIEW[worst]


def failing(gates: Iterable[Gate]) -> list[Gate]:
    return [g for g in gates if g.verdict != "pass"]


# -- the product's gates (bounds in one place) --------------------------------------------------


def clock_gate(error_bound_s: float, offset_known: bool, poll_s: float) -> Gate:
    """Event clocks must agree with the switches' to within a quarter of a poll interval.

    What a counter view does with a phase's time is put it in a poll interval (the measured view
    takes its interval's rate, the attribution its overlap with each interval, the live heatmap
    draws it on a column): a systematic error ε moves about ε/poll of a phase's bytes into the
    wrong interval, whatever the phase's own length. So the bound is a fraction of the poll
    interval — flag above 10 %, withhold above 25 %. ``error_bound_s`` is the *systematic* error
    (skew and drift, ``clocks.ClockAlignment.error_bound_ns``); noise has its own gate. The
    projection uses no clock and is never judged by this gate."""
    value = error_bound_s if offset_known else math.inf
    g = check(
        "clock_alignment",
        "phase events and counters share a clock (offset exchanged, residual skew under a quarter "
        f"of the {_fmt(poll_s, 's')} poll interval)",
        value, flag_bound=0.1 * poll_s, withhold_bound=0.25 * poll_s, unit="s",
    )
    if not offset_known:
        return Gate(g.name, g.assumption, math.inf, "s", g.flag_bound, g.withhold_bound, False, "withhold",
                    "clock_alignment: no clock offset was exchanged for some ranks — " + g.assumption)
    return g


def clock_noise_gate(noise_s: float, poll_s: float) -> Gate:
    """The scatter of event times around each rank's clock trend (the probe's offset samples,
    scheduling): flagged when it reaches a quarter poll interval, never withheld — it has no
    sign to misplace phases by, and the phase windows are medians across ranks."""
    return check(
        "clock_noise",
        "event times scatter little around each rank's clock trend (offset-exchange noise, not skew)",
        noise_s, flag_bound=0.25 * poll_s, withhold_bound=math.inf, unit="s",
    )


def run_share_gate(share: float, projected_bytes: float, measured_bytes: float, ports: int) -> Gate:
    """The counters on the run's NIC ports are the run's traffic: min(P, M) / max(P, M) of the
    run's projected bytes P and the counted bytes M on those ports over the same intervals.

    Every byte the run sends leaves through one of its NICs' leaf ports and every byte it receives
    arrives through one, whatever the routing, so the sum over those ports is the run's bytes
    (routing errors are ``projected_vs_measured``'s to judge, not this gate's). Low because
    M ≫ P: the ports carry mostly other traffic (another job on the hosts, or the run's fabric is
    not the one the job ran on); low because M ≪ P: the counters do not see the run."""
    if not math.isfinite(share):
        return Gate("counters_of_run", "the counters on the run's ports are the run's own traffic", math.nan,
                    "ratio", 0.7, 0.5, True, "flag",
                    "counters_of_run: not checked — no poll interval inside the run's phases holds only "
                    "reported steps (or no bytes at all)")
    g = check(
        "counters_of_run",
        "the counters on the run's ports are the run's own traffic (its projected bytes match the "
        "measured bytes on its NICs' leaf ports)",
        share, flag_bound=0.7, withhold_bound=0.5, unit="ratio", higher_is_better=True,
    )
    if g.verdict == "pass":
        return g
    if measured_bytes > projected_bytes:
        why = (f"the run is {_fmt(share, 'ratio')} of the bytes counted on its {ports} NIC ports — "
               "the counters are mostly other traffic (another job, or not the fabric the run used)")
    else:
        why = (f"the counters on its {ports} NIC ports saw {_fmt(share, 'ratio')} of the run's bytes — "
               "the run's traffic is not on these ports (not the fabric the run used?)")
    return Gate(g.name, g.assumption, g.value, g.unit, g.flag_bound, g.withhold_bound, True, g.verdict,
                f"counters_of_run: {why}")


def rank_ranges(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` → ``"0–2, 5, 7–8"`` (at most 8 ranges, then how many more)."""
    ordered = sorted({int(r) for r in ranks})
    spans: list[tuple[int, int]] = []
    for r in ordered:
        if spans and r == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], r)
        else:
            spans.append((r, r))
    text = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in spans[:8])
    return text + (f" and {len(spans) - 8} more ranges" if len(spans) > 8 else "")


def coverage_gate(coverage: float, missing: Iterable[int] = (), problems: Sequence[str] = ()) -> Gate:
    """The rank map's share of the world; when it falls short, which ranks are missing and which
    entries could not be placed (an unknown host or NIC), not only the percentage."""
    g = check(
        "rank_map_coverage", "the rank map places every rank of the job on a NIC of the fabric",
        coverage, flag_bound=0.99, withhold_bound=0.9, unit="ratio", higher_is_better=True,
    )
    missing = list(missing)
    if g.verdict == "pass" or not (missing or problems):
        return g
    said = [f"not placed: ranks {rank_ranges(missing)}"] if missing else []
    said += [f"{'; '.join(problems[:3])}" + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else "")
             ] if problems else []
    return replace(g, reason=f"{g.reason} — {'; '.join(said)}")


def projection_gate(rel_error: float) -> Gate:
    return check(
        "projected_vs_measured",
        "projected bytes per poll interval match measured counters (same routing, same clocks)",
        rel_error, flag_bound=0.1, withhold_bound=0.25, unit="ratio",
    )


def poll_gate(poll_s: float, phase_s: float, intervals: int, keys: int, sampled: str = "") -> Gate:
    """Attribution needs polls that cut steps at many places: ≥ 2 intervals per (layer, phase).
    ``sampled``: how many steps the run reports, when not all (only gap-free intervals count)."""
    ratio = intervals / max(keys, 1)
    among = f" (the run reports {sampled} steps: only intervals without unreported ones count)"
    among = among if sampled else ""
    return check(
        "poll_vs_phase",
        f"enough poll intervals ({_fmt(poll_s, 's')} polls, {_fmt(phase_s, 's')} phases) to separate "
        f"the phases: at least 2 per (layer, phase){among}",
        ratio, flag_bound=2.0, withhold_bound=1.0, unit="intervals/phase", higher_is_better=True,
    )


def residual_gate(residual_rel: float) -> Gate:
    return check(
        "attribution_residual",
        "measured counters are explained by the phases (NNLS residual small)",
        residual_rel, flag_bound=0.3, withhold_bound=0.5, unit="ratio",
    )


@dataclass(frozen=True)
class StepCoverage:
    """Which training steps the run reported, and which poll intervals saw unreported ones.

    A job may report only some steps (a sampling probe, the demo's twin reporting every k-th step
    to spare a laptop). Counters still carry every step's traffic, so a poll interval that
    overlaps the gap between two reported steps that are not consecutive holds bytes no event
    explains: comparing the projection with it, or attributing it, would blame the model."""

    reported: int  # distinct steps with events
    span: int  # last step - first step + 1
    gap_intervals: npt.NDArray[np.bool_]  # (intervals,): the interval overlaps an unreported stretch

    @property
    def fraction(self) -> float:
        return self.reported / self.span if self.span else 1.0


def step_coverage(
    steps: npt.ArrayLike, start_ns: npt.ArrayLike, end_ns: npt.ArrayLike, edges_ns: npt.ArrayLike
) -> StepCoverage:
    """Per-phase ``steps`` with their windows against poll ``edges_ns`` (vectorized over steps)."""
    steps = np.asarray(steps, dtype=np.int64)
    edges = np.asarray(edges_ns, dtype=np.int64)
    n_int = max(len(edges) - 1, 0)
    if not len(steps):
        return StepCoverage(0, 0, np.zeros(n_int, dtype=bool))
    uniq, inv = np.unique(steps, return_inverse=True)
    first = np.full(len(uniq), np.iinfo(np.int64).max)
    last = np.full(len(uniq), np.iinfo(np.int64).min)
    np.minimum.at(first, inv, np.asarray(start_ns, dtype=np.int64))
    np.maximum.at(last, inv, np.asarray(end_ns, dtype=np.int64))
    jump = np.flatnonzero(np.diff(uniq) > 1)  # reported step uniq[j] is followed by uniq[j+1] > +1
    gap_lo, gap_hi = last[jump], first[jump + 1]  # the unreported stretch between them
    gap = np.zeros(n_int, dtype=bool)
    if len(jump) and n_int:
        # interval i overlaps gap g when edges[i] < gap_hi and edges[i+1] > gap_lo: mark via a
        # difference array over the interval range each gap touches
        i0 = np.clip(np.searchsorted(edges, gap_lo, side="right") - 1, 0, n_int)
        i1 = np.clip(np.searchsorted(edges, gap_hi, side="left"), 0, n_int)
        mark = np.zeros(n_int + 1, dtype=np.int64)
        np.add.at(mark, i0, 1)
        np.add.at(mark, i1, -1)
        gap = np.cumsum(mark[:-1]) > 0
    return StepCoverage(len(uniq), int(uniq[-1] - uniq[0] + 1), gap)


def projected_vs_measured(
    start_ns: npt.ArrayLike, end_ns: npt.ArrayLike, projected: npt.ArrayLike, edges_ns: npt.ArrayLike,
    measured: npt.ArrayLike, *, skip: npt.ArrayLike | None = None,
) -> float:
    """Σ|projected − measured| / Σ|measured| over the poll intervals that lie inside the phases
    (the run's edges would count as error) and are not in ``skip`` (intervals with unreported
    steps); ``projected`` (phases, C), ``measured`` (intervals, C). NaN: no interval to compare."""
    start = np.asarray(start_ns, dtype=np.int64)
    end = np.asarray(end_ns, dtype=np.int64)
    edges = np.asarray(edges_ns, dtype=np.int64)
    meas = np.asarray(measured, dtype=np.float64)
    pred = interval_bytes(start, end, np.asarray(projected, dtype=np.float64), edges)
    ok = np.isfinite(meas).all(axis=1)
    inside = (edges[:-1] >= start.min()) & (edges[1:] <= end.max()) & ok
    if skip is not None:
        inside &= ~np.asarray(skip, dtype=bool)
    denom = float(np.abs(meas[inside]).sum())
    return float(np.abs(pred[inside] - meas[inside]).sum() / denom) if denom > 0 else math.nan


def run_share(
    start_ns: npt.ArrayLike, end_ns: npt.ArrayLike, projected: npt.ArrayLike, edges_ns: npt.ArrayLike,
    measured: npt.ArrayLike, *, ports: npt.ArrayLike, skip: npt.ArrayLike | None = None,
) -> tuple[float, float, float]:
    """(min(P, M) / max(P, M), P, M): the run's projected bytes P and the measured bytes M summed
    over the columns ``ports`` (the run's NIC ports, in and out) and the poll intervals that lie
    inside the run's phases and are not in ``skip``. NaN share: nothing to compare."""
    start = np.asarray(start_ns, dtype=np.int64)
    end = np.asarray(end_ns, dtype=np.int64)
    edges = np.asarray(edges_ns, dtype=np.int64)
    cols = np.asarray(ports, dtype=np.int64)
    meas = np.asarray(measured, dtype=np.float64)[:, cols]
    pred = interval_bytes(start, end, np.asarray(projected, dtype=np.float64)[:, cols], edges)
    ok = np.isfinite(meas).all(axis=1)
    inside = (edges[:-1] >= start.min()) & (edges[1:] <= end.max()) & ok
    if skip is not None:
        inside &= ~np.asarray(skip, dtype=bool)
    p, m = float(pred[inside].sum()), float(meas[inside].sum())
    if not inside.any() or max(p, m) <= 0:
        return math.nan, p, m
    return min(p, m) / max(p, m), p, m


def unverified_projection_gate(why: str) -> Gate:
    """``projected_vs_measured`` that could not be evaluated for a reason that is no fault of the
    projection (no counters, only sampled steps): flagged as unverified, never passed."""
    return Gate("projected_vs_measured", "projected bytes per poll interval match measured counters",
                math.nan, "ratio", 0.1, 0.25, False, "flag",
                f"projected_vs_measured: {why} — projection unverified")


PRIOR_REL_ERROR_FLOOR = 0.01  # the projection as attribution prior is never trusted beyond 1 % per phase
