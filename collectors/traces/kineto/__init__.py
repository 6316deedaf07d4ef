"""PyTorch profiler (Kineto) Chrome-trace JSON → normalized phase events (job_events.md §2).

Every generation of the format: NCCL kernels with collective args (PyTorch ≥ 2.3) and without
(``ncclKernel_*`` / ``ncclDevKernel_*``), ``record_param_comms`` with its args, c10d dispatcher
ops with recorded shapes, ``nccl:*`` / ``gloo:*`` titles, gloo's worker threads; every
collective. Streaming (``scanner``): memory follows the number of collectives, not the file.
Backward all-to-alls without a label take their forward's layer and phase (``backward``).
The reader fills an ``ImportReport``; a file with collectives that yields no event raises
``TraceFormatError`` with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

from collectors.traces.errors import TraceFormatError
from collectors.traces.kineto.backward import match_backward
from collectors.traces.kineto.calls import Call, build_calls
from collectors.traces.kineto.describe import Context, Described, describe, order_in_modules
from collectors.traces.kineto.events import Evidence, KinetoEvent
from collectors.traces.kineto.labels import Spans, Steps
from collectors.traces.opening import DEFAULT_LIMITS, Limits, TraceBytes
from collectors.traces.ranks import resolve_rank
from collectors.traces.report import ImportReport, check_not_silent
from collectors.traces.scanner import ArrayScan

__all__ = ["read_kineto"]


def read_kineto(
    stream: IO[bytes],
    rank: int | None = None,
    *,
    name: str = "",
    report: ImportReport | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Iterator[dict[str, Any]]:
    """Yield normalized events from one rank's Kineto trace; ``name`` (the file's path) may say
    the rank when the trace does not; ``report`` is filled as the file is read."""
    report = report if report is not None else ImportReport(kind="kineto")
    report.kind = report.kind or "kineto"
    what = f"Kineto trace {name}".strip()
    scan = ArrayScan(TraceBytes(stream, what, limits), "traceEvents", KinetoEvent, what)
    evidence = Evidence()
    for batch in scan.batches():
        evidence.add(batch)
    ctx = _context(scan.header, evidence, name, rank, what, report)
    calls, unclaimed = build_calls(evidence, ctx.world or 0)
    order_in_modules(calls, ctx)
    report.ignored.update(evidence.ignored)
    report.unusable.update(evidence.unusable)
    report.evidence_seen += len(evidence.spans)
    if unclaimed:
        report.notes["gloo worker titles matched to no c10d op (not imported)"] += len(unclaimed)
    described = [(call, _describe(call, i, ctx)) for i, call in enumerate(calls)]
    match_backward(described, Spans((p, t, a, b, None) for p, t, a, b in evidence.backward), report.notes)
    events = [ev for _call, d in described if (ev := _record(d, report))]
    report.files.append(
        {"file": name or "-", "rank": ctx.rank, "rank_from": ctx.rank_from, "events": len(events)}
    )
    check_not_silent(report, what)
    yield from events


def _describe(call: Call, index: int, ctx: Context) -> Described:
    """One call described; a call whose args are malformed (a string where a count belongs) is
    unusable with that reason, and the file's other calls are still imported."""
    try:
        return describe(call, index, ctx)
    except TraceFormatError as exc:
        return Described(None, call.collective() or "unknown", "args", None, str(exc)[:200], None)


def _record(d: Described, report: ImportReport) -> dict[str, Any] | None:
    """Count one described call in the report; its event, if it has one."""
    if d.algorithm:
        report.notes[f"{d.collective} by NCCL {d.algorithm} (from the kernel name): message bytes only"] += 1
    if d.event is None:
        report.unusable[d.problem or "unusable"] += 1
        return None
    if d.problem:
        report.notes[f"{d.collective}: {d.problem}"] += 1
    ev = d.event
    peers = "send_bytes_per_peer" in ev or "recv_bytes_per_peer" in ev
    report.recognise(d.collective, d.evidence, d.message_bytes, peers)
    report.time_kinds[ev["time_kind"]] += 1
    if ev["step"] is not None:
        report.steps.add(ev["step"])
    if ev["layer"] is not None:
        report.labelled += 1
    return ev


def _context(  # noqa: PLR0917
    header: dict[str, Any], ev: Evidence, name: str, given: int | None, what: str, report: ImportReport
) -> Context:
    info = header.get("distributedInfo") or {}
    if not isinstance(info, dict):
        raise TraceFormatError(f"{what}: distributedInfo must be an object")
    in_file = info.get("rank")
    if in_file is not None and not (type(in_file) is int and in_file >= 0):
        raise TraceFormatError(
            f"{what}: distributedInfo.rank must be a non-negative integer, got {str(in_file)[:40]!r}"
        )
    rank, source = resolve_rank(in_file, name, given)
    if rank is None:
        raise TraceFormatError(
            f"{what}: no distributedInfo.rank and no rank in the file name; give the rank explicitly"
        )
    if given is not None and given != rank:
        report.notes[f"rank {rank} taken from the {source}, not the rank given ({given})"] += 1
    base = header.get("baseTimeNanoseconds")
    if base is not None and (type(base) is not int or base < 0):
        raise TraceFormatError(f"{what}: baseTimeNanoseconds must be a non-negative integer")
    world = info.get("world_size")
    if type(world) is int and 0 < world <= rank:  # hand-edited or merged traces; the run's size decides
        report.notes[f"rank {rank} (from the {source}) is not below the trace's world_size {world}"] += 1
    pgs = []
    for pg in info.get("pg_config") or []:
        ranks = pg.get("ranks") if isinstance(pg, dict) else None
        if isinstance(ranks, list) and ranks and all(type(r) is int and r >= 0 for r in ranks):
            pgs.append((str(pg.get("pg_name", ""))[:64], ranks))
    return Context(
        rank=rank,
        rank_from=source,
        host=str(header.get("host_name", ""))[:200],
        base_ns=base or 0,  # older traces: no base, absolute Unix-epoch µs
        world=world if type(world) is int and world > 0 else None,
        pgs=pgs,
        steps=Steps(ev.steps),
        labels=Spans((p, t, a, b, (layer, phase)) for p, t, a, b, layer, phase in ev.labels),
        modules=Spans(ev.modules),
    )
