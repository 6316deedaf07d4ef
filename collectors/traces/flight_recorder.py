"""PyTorch Flight Recorder dumps (JSON, or pickle through the plain-data unpickler) → events.

FR carries per-collective totals (tensor shapes and dtypes), the PG and its ``collective_seq_id``
(= Kineto ``Seq`` and, for a PG used only for all-to-alls, the probe's ``seq``), and host times:
``time_created_ns`` (enqueue) and, on NCCL, when the watchdog saw it complete. No per-peer split,
no layer/phase (job_events.md §4). The file does not name its rank: pass it.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterator
from typing import IO, Any

import ijson

from collectors.traces.errors import TraceFormatError
from collectors.traces.safe_pickle import loads_plain
from collectors.traces.schema import DTYPE_BYTES

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


def _nbytes(sizes: Any, dtypes: Any) -> int | None:
    if not isinstance(sizes, list) or not isinstance(dtypes, list) or len(sizes) != len(dtypes):
        return None
    total = 0
    for shape, dtype in zip(sizes, dtypes, strict=True):
        itemsize = DTYPE_BYTES.get(str(dtype))
        if itemsize is None or not isinstance(shape, list | tuple):
            return None
        total += math.prod(int(x) for x in shape) * itemsize
    return total


def entry_to_event(entry: dict[str, Any], rank: int) -> dict[str, Any]:
    name = str(entry.get("profiling_name", ""))
    collective = name.split(":", 1)[1] if ":" in name else name
    pg = entry.get("process_group") or ["", ""]
    pg_name = str(pg[0]) if isinstance(pg, list | tuple) and pg else ""
    p2p = bool(entry.get("is_p2p"))
    seq = entry.get("p2p_seq_id" if p2p else "collective_seq_id")
    start = entry.get("time_created_ns") or 0
    completed = entry.get("time_discovered_completed_ns") or 0
    duration_ms = entry.get("duration_ms")
    if isinstance(duration_ms, int | float) and completed:
        start_ns, end_ns, kind = completed - round(duration_ms * 1e6), completed, "host_watchdog"
    elif completed:
        start_ns, end_ns, kind = start, completed, "host_watchdog"
    else:
        start_ns, end_ns, kind = start, start, "host_enqueue"
    return {
        "id": f"fr{rank}-{pg_name}-{'p' if p2p else 'c'}{seq}",
        "rank": rank,
        "layer": None,
        "phase": _PHASE.get(collective, "other"),
        "collective": collective[:40] or "unknown",
        "pg": pg_name,
        "seq": seq,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "bytes_sent": _nbytes(entry.get("input_sizes"), entry.get("input_dtypes")),
        "bytes_recv": _nbytes(entry.get("output_sizes"), entry.get("output_dtypes")),
        "source": "fr",
        "time_kind": kind,
    }


def read_flight_recorder(
    stream: IO[bytes], rank: int | None, pickled: bool = False
) -> Iterator[dict[str, Any]]:
    if rank is None:
        raise TraceFormatError("Flight Recorder dumps do not name their rank: give rank=")
    if pickled:
        try:
            dump = loads_plain(stream.read())
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError) as exc:
            raise TraceFormatError(f"Flight Recorder pickle refused: {exc}") from exc
        if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
            raise TraceFormatError("Flight Recorder pickle has no 'entries' list")
        entries: Any = dump["entries"]
    else:
        entries = ijson.items(stream, "entries.item", use_float=True)
    try:
        for entry in entries:
            if isinstance(entry, dict):
                yield entry_to_event(entry, rank)
    except ijson.JSONError as exc:
        raise TraceFormatError(f"Flight Recorder JSON is not valid JSON: {exc}") from exc
