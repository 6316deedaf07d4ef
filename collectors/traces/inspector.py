"""NCCL Inspector JSON lines (``coll_perf`` / ``p2p_perf`` records) → events (job_events.md §5.2).

``rank`` is the *communicator* rank (a global-rank map is outside the file); times are µs since
the epoch: the verbose ``event_trace_ts`` when present, else the dump time minus the exec time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

import orjson

from collectors.traces.errors import TraceFormatError
from collectors.traces.opening import TraceBytes
from collectors.traces.report import ImportReport

_PHASE = {
    "AllReduce": "allreduce",
    "AllGather": "allgather",
    "AllGatherV": "allgather",
    "ReduceScatter": "reducescatter",
    "Send": "send",
    "Recv": "recv",
}


def _times(rec: dict[str, Any], perf: dict[str, Any], kind: str) -> tuple[int, int]:
    trace = rec.get("event_trace_ts") or perf.get("event_trace_ts") or {}
    start_us, stop_us = trace.get(f"{kind}_start_ts"), trace.get(f"{kind}_stop_ts")
    if isinstance(start_us, int) and isinstance(stop_us, int):
        return start_us * 1000, stop_us * 1000
    end_ns = int(rec.get("metadata", {}).get("dump_timestamp_us", 0)) * 1000
    return end_ns - int(perf.get(f"{kind}_exec_time_us", 0)) * 1000, end_ns


MAX_LINE_BYTES = 1 << 20


def read_inspector(stream: IO[bytes], report: ImportReport | None = None) -> Iterator[dict[str, Any]]:
    report = report if report is not None else ImportReport(kind="inspector")
    for event in _events(stream):
        report.recognise(
            str(event["collective"]), "inspector", event.get("bytes_sent"), "bytes_sent" not in event
        )
        report.time_kinds[str(event["time_kind"])] += 1
        yield event


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    src, rest = TraceBytes(stream, "Inspector log"), b""
    while chunk := src.read(1 << 20):
        rest += chunk
        *lines, rest = rest.split(b"\n")
        if len(rest) > MAX_LINE_BYTES:
            raise TraceFormatError(f"Inspector log: a line longer than {MAX_LINE_BYTES:,} bytes")
        yield from lines
    yield rest


def _events(stream: IO[bytes]) -> Iterator[dict[str, Any]]:
    for n, line in enumerate(_lines(stream), start=1):
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise TraceFormatError(f"Inspector line {n}: invalid JSON: {exc}") from exc
        if not isinstance(rec, dict) or not all(
            isinstance(rec.get(k) or {}, dict) for k in ("header", "metadata")
        ):
            raise TraceFormatError(f"Inspector line {n}: not an Inspector record (header/metadata objects)")
        try:
            yield from _record(rec)
        except (TypeError, ValueError, AttributeError) as exc:
            raise TraceFormatError(f"Inspector line {n}: malformed field ({exc})") from exc


def _record(rec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if True:
        header = rec.get("header") or {}
        rank = header.get("rank")
        comm = str(header.get("comm_name") or header.get("id") or "")[:64]
        host = str((rec.get("metadata") or {}).get("hostname", ""))
        if "coll_perf" in rec:
            perf, kind = rec["coll_perf"], "coll"
            size = perf.get("coll_msg_size_bytes")
            start_ns, end_ns = _times(rec, perf, kind)
            name = str(perf.get("coll", ""))
            yield {
                "id": f"i{comm}-{rank}-c{perf.get('coll_sn')}",
                "rank": rank,
                "host": host,
                "pg": comm,
                "collective": name,
                "phase": _PHASE.get(name, "other"),
                "seq": perf.get("coll_sn"),
                "start_ns": start_ns,
                "end_ns": end_ns,
                "bytes_sent": size,
                "source": "inspector",
                "time_kind": "gpu_kernel" if perf.get("coll_timing_source") == "kernel_gpu" else "host_call",
            }
        elif "p2p_perf" in rec:
            perf, kind = rec["p2p_perf"], "p2p"
            size, peer, name = perf.get("p2p_msg_size_bytes"), perf.get("p2p_peer"), str(perf.get("p2p", ""))
            start_ns, end_ns = _times(rec, perf, kind)
            per_peer = {str(peer): size} if isinstance(peer, int) and isinstance(size, int) else None
            yield {
                "id": f"i{comm}-{rank}-p{perf.get('p2p_sn')}-{name}",
                "rank": rank,
                "host": host,
                "pg": comm,
                "collective": name,
                "phase": _PHASE.get(name, "other"),
                "seq": perf.get("p2p_sn"),
                "start_ns": start_ns,
                "end_ns": end_ns,
                "source": "inspector",
                **(
                    {"send_bytes_per_peer": per_peer} if name == "Send" else {"recv_bytes_per_peer": per_peer}
                ),
                "time_kind": "gpu_kernel" if perf.get("p2p_timing_source") == "kernel_gpu" else "host_call",
            }
