"""PyTorch Flight Recorder dumps (JSON, or pickle through the plain-data unpickler) → events.

FR carries per-collective totals (tensor shapes and dtypes), the PG and its ``collective_seq_id``
(= Kineto ``Seq`` and, for a PG used only for all-to-alls, the probe's ``seq``), and host times:
``time_created_ns`` (enqueue) and, on NCCL, when the watchdog saw it complete. No per-peer split,
no layer/phase (job_events.md §4). The file does not name its rank: the caller or the file name
(``nccl_trace_rank_3``) does.

Hostile dumps: JSON entries are streamed and typed (``scanner``; a string where a time belongs is
a ``TraceFormatError`` naming the entry and field); a pickle is loaded by the plain-data
unpickler after a bounded pre-scan, and its object graph is walked with a budget before use, so
shared references cannot multiply the work.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterator
from typing import IO, Any

import msgspec

from collectors.traces.errors import TraceFormatError
from collectors.traces.opening import READ_BYTES, TraceBytes
from collectors.traces.ranks import resolve_rank
from collectors.traces.report import ImportReport
from collectors.traces.safe_pickle import MAX_PICKLE_BYTES, loads_plain
from collectors.traces.scanner import ArrayScan
from collectors.traces.schema import dtype_bytes

_PHASE = {
    "all_reduce": "allreduce",
    "allreduce": "allreduce",
    "all_gather": "allgather",
    "_allgather_base": "allgather",
    "allgather": "allgather",
    "reduce_scatter": "reducescatter",
    "_reduce_scatter_base": "reducescatter",
    "send": "send",
    "recv": "recv",
}
Shape = list[int]
_MAX_I64 = 2**63 - 1


class FrEntry(msgspec.Struct):
    """The fields of one FR entry the importer reads, typed (older dumps: integer dtype codes)."""

    profiling_name: str = ""
    process_group: list[str | int] | None = None
    is_p2p: bool = False
    collective_seq_id: int | None = None
    p2p_seq_id: int | None = None
    time_created_ns: int | None = None
    time_discovered_completed_ns: int | None = None
    duration_ms: float | None = None
    input_sizes: list[Shape] | None = None
    input_dtypes: list[str | int] | None = None
    output_sizes: list[Shape] | None = None
    output_dtypes: list[str | int] | None = None


def _nbytes(sizes: list[Shape] | None, dtypes: list[str | int] | None) -> int | None:
    if sizes is None or dtypes is None or len(sizes) != len(dtypes):
        return None
    total = 0
    for shape, dtype in zip(sizes, dtypes, strict=True):
        itemsize = dtype_bytes(dtype)
        if itemsize is None or any(d < 0 for d in shape):
            return None
        total += math.prod(shape) * itemsize
    return total if total <= _MAX_I64 else None


def entry_to_event(entry: FrEntry, rank: int, index: int = 0) -> dict[str, Any]:
    name = entry.profiling_name
    collective = name.split(":", 1)[1] if ":" in name else name
    pg = entry.process_group or ("", "")
    pg_name = str(pg[0])[:64] if pg else ""
    seq = entry.p2p_seq_id if entry.is_p2p else entry.collective_seq_id
    start = entry.time_created_ns or 0
    completed = entry.time_discovered_completed_ns or 0
    duration_ms = entry.duration_ms
    if duration_ms is not None and not (math.isfinite(duration_ms) and 0 <= duration_ms < 1e9):
        raise TraceFormatError(
            f"Flight Recorder entry {index}: duration_ms {duration_ms!r} is not a duration"
        )
    if duration_ms is not None and completed:
        start_ns, end_ns, kind = completed - round(duration_ms * 1e6), completed, "host_watchdog"
    elif completed:
        start_ns, end_ns, kind = start, completed, "host_watchdog"
    else:
        start_ns, end_ns, kind = start, start, "host_enqueue"
    return {
        "id": f"fr{rank}-{pg_name}-{'p' if entry.is_p2p else 'c'}{seq}",
        "rank": rank,
        "layer": None,
        "phase": _PHASE.get(collective, "other"),
        "collective": collective[:40] or "unknown",
        "pg": pg_name,
        "seq": seq,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "bytes_sent": _nbytes(entry.input_sizes, entry.input_dtypes),
        "bytes_recv": _nbytes(entry.output_sizes, entry.output_dtypes),
        "source": "fr",
        "time_kind": kind,
    }


class _Dump(msgspec.Struct):
    entries: list[Any] = []


def read_flight_recorder(
    stream: IO[bytes],
    rank: int | None,
    pickled: bool = False,
    *,
    name: str = "",
    report: ImportReport | None = None,
) -> Iterator[dict[str, Any]]:
    report = report if report is not None else ImportReport(kind="fr")
    rank, _source = resolve_rank(None, name, rank) if rank is None else resolve_rank(None, "", rank)
    if rank is None:
        raise TraceFormatError(
            "Flight Recorder dumps do not name their rank: give rank= (or a file name with it)"
        )
    what = f"Flight Recorder dump {name}".strip()
    entries = _pickle_entries(stream, what) if pickled else _json_entries(stream, what)
    n = 0
    for index, entry in enumerate(entries):
        event = entry_to_event(entry, rank, index)
        report.recognise(event["collective"], "flight recorder", event["bytes_sent"], False)
        report.time_kinds[event["time_kind"]] += 1
        n += 1
        yield event
    report.files.append({"file": name or "-", "rank": rank, "events": n})


def _json_entries(stream: IO[bytes], what: str) -> Iterator[FrEntry]:
    scan = ArrayScan(TraceBytes(stream, what), "entries", FrEntry, what)
    for batch in scan.batches():
        yield from batch


def _read_whole(src: TraceBytes, what: str) -> bytes:
    """A pickle is loaded whole: read in pieces up to its cap (one ``read(huge)`` of a file on
    disk would ask the OS for that buffer first)."""
    parts, total = [], 0
    while chunk := src.read(READ_BYTES):
        total += len(chunk)
        if total > MAX_PICKLE_BYTES:
            raise TraceFormatError(f"{what}: pickle larger than {MAX_PICKLE_BYTES:,} bytes; refused")
        parts.append(chunk)
    return b"".join(parts)


def _pickle_entries(stream: IO[bytes], what: str) -> list[FrEntry]:
    try:
        dump = loads_plain(_read_whole(TraceBytes(stream, what), what))
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, MemoryError) as exc:
        raise TraceFormatError(f"{what}: pickle refused: {exc}") from exc
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        raise TraceFormatError(f"{what}: pickle has no 'entries' list")
    try:
        return msgspec.convert(dump["entries"], list[FrEntry], strict=False)
    except msgspec.ValidationError as exc:
        raise TraceFormatError(f"{what}: {exc}") from exc
