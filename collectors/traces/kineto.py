"""PyTorch profiler (Kineto) Chrome-trace JSON → normalized phase events (job_events.md §2).

Streaming: the header (``distributedInfo``, ``baseTimeNanoseconds``, ``host_name``) is read from
the head of the file (Kineto writes it before ``traceEvents``; a second pass finds it otherwise)
and ``traceEvents`` is walked item by item with ijson's C backend. Only collective-related
records are kept (bounded by the number of collectives, not the file size).

Two paths:
- NCCL: GPU ``kernel`` events carrying ``"Collective name"`` (+ split sizes, PG, ``Seq``) →
  ``time_kind = gpu_kernel``.
- gloo / CPU: ``c10d::alltoall_base_`` cpu_ops (``Concrete Inputs`` [3] = output splits,
  [4] = input splits; ``Input Dims`` [0] = output shape, [1] = input shape), timed by the
  matching ``gloo:all_to_all`` annotation on the gloo thread (paired in order).
Layer and phase come from the innermost enclosing ``moe/layer{L}/{phase}`` annotation.
"""

from __future__ import annotations

import bisect
import gzip
import math
import re
from collections import defaultdict
from collections.abc import Iterator
from typing import IO, Any

import ijson
import orjson

from collectors.traces.errors import TraceFormatError
from collectors.traces.schema import DTYPE_BYTES, PHASE_LABEL_RE, PHASES

HEAD_BYTES = 1 << 20
_LIST_RE = re.compile(r"-?\d+")
_COLLECTIVE_PHASE = {
    "allreduce": "allreduce",
    "all_reduce": "allreduce",
    "_allgather_base": "allgather",
    "allgather": "allgather",
    "all_gather": "allgather",
    "reduce_scatter": "reducescatter",
    "_reduce_scatter_base": "reducescatter",
    "send": "send",
    "recv": "recv",
}


def _open(stream: IO[bytes]) -> IO[bytes]:
    magic = stream.read(2)
    stream.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=stream)  # type: ignore[return-value]
    return stream


def _int_list(text: Any) -> list[int] | None:
    """ "[11, 12, 13]" → [11, 12, 13]; None when empty or truncated ("..." beyond 30 entries)."""
    if isinstance(text, list):
        return [int(x) for x in text]
    if not isinstance(text, str) or "..." in text:
        return None
    values = [int(x) for x in _LIST_RE.findall(text)]
    return values or None


def _read_header(stream: IO[bytes]) -> dict[str, Any] | None:
    head = stream.read(HEAD_BYTES)
    stream.seek(0)
    idx = head.find(b'"traceEvents"')
    if idx < 0:
        return None
    text = head[:idx].rstrip().rstrip(b",") + b"}"
    try:
        header = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return header if isinstance(header, dict) and "baseTimeNanoseconds" in header else None


def _header_second_pass(stream: IO[bytes]) -> dict[str, Any]:
    header: dict[str, Any] = {}
    for key in ("baseTimeNanoseconds", "distributedInfo", "host_name"):
        stream.seek(0)
        for value in ijson.items(stream, key):
            header[key] = value
            break
    stream.seek(0)
    return header


class _Annotations:
    """Phase annotations of one thread, for 'innermost enclosing' lookups."""

    def __init__(self) -> None:
        self.items: list[tuple[float, float, int | None, str]] = []  # (ts, end, layer, phase)

    def sort(self) -> None:
        self.items.sort()
        self._starts = [a[0] for a in self.items]

    def at(self, ts: float) -> tuple[int | None, str] | None:
        best = None
        for i in range(bisect.bisect_right(self._starts, ts) - 1, -1, -1):
            start, end, layer, phase = self.items[i]
            if end >= ts and (best is None or start >= best[0]):
                best = (start, layer, phase)
                break  # sorted by start: the first containing one from the right is innermost
        return (best[1], best[2]) if best else None


def read_kineto(stream: IO[bytes], rank: int | None = None) -> Iterator[dict[str, Any]]:
    """Yield normalized events from one rank's Kineto trace."""
    stream = _open(stream)
    header = _read_header(stream)
    ann: dict[Any, _Annotations] = defaultdict(_Annotations)
    a2a_ops: list[dict[str, Any]] = []
    gloo_exec: list[tuple[float, float]] = []
    kernels: list[dict[str, Any]] = []
    try:
        for ev in ijson.items(stream, "traceEvents.item"):  # Decimal ts: exact ns from µs
            name = ev.get("name", "")
            if not isinstance(name, str) or ev.get("ph") != "X":
                continue
            cat = ev.get("cat", "")
            if name.startswith("moe/"):
                m = PHASE_LABEL_RE.match(name)
                if m and m.group(2) in PHASES:
                    ts = float(ev["ts"])
                    layer = int(m.group(1)) if m.group(1) is not None else None
                    ann[(ev.get("pid"), ev.get("tid"))].items.append(
                        (ts, ts + float(ev.get("dur", 0)), layer, m.group(2))
                    )
            elif name == "c10d::alltoall_base_" and cat == "cpu_op":
                a2a_ops.append(ev)
            elif name == "gloo:all_to_all":
                gloo_exec.append((ev["ts"], ev.get("dur", 0)))
            elif cat == "kernel" and "Collective name" in (ev.get("args") or {}):
                kernels.append(ev)
    except ijson.JSONError as exc:
        raise TraceFormatError(f"Kineto trace is not valid JSON: {exc}") from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceFormatError(f"Kineto trace event malformed: {exc}") from exc
    if header is None:
        header = _header_second_pass(stream)
    dist_info = header.get("distributedInfo") or {}
    if rank is None:
        rank = dist_info.get("rank")
    if not isinstance(rank, int):
        raise TraceFormatError("Kineto trace has no distributedInfo.rank; give the rank explicitly")
    base = header.get("baseTimeNanoseconds")
    # no base: older traces carry absolute Unix-epoch µs (ts > 1e15)
    base_ns = int(base) if isinstance(base, int) else 0
    host = str(header.get("host_name", ""))
    for a in ann.values():
        a.sort()
    common = {"rank": rank, "host": host, "source": "kineto"}
    if kernels:
        yield from _nccl_events(kernels, ann, base_ns, common)
    else:
        yield from _gloo_events(a2a_ops, sorted(gloo_exec), ann, base_ns, dist_info, common)


def _ns(base_ns: int, ts_us: Any) -> int:
    """ts in µs with 3 decimals (a Decimal from ijson: exact, unlike a float at 1e15 µs) → ns."""
    return base_ns + int(round(ts_us * 1000))  # noqa: RUF046 - Decimal in, int out


def _label(ann: dict[Any, _Annotations], key: Any, ts: float) -> tuple[int | None, str]:
    a = ann.get(key)
    found = a.at(ts) if a is not None else None
    return found if found is not None else (None, "other")


def _peers(splits: list[int] | None, row_bytes: int, pg_ranks: list[int] | None) -> dict[str, int] | None:
    if splits is None or pg_ranks is None or len(splits) != len(pg_ranks):
        return None
    return {str(r): s * row_bytes for r, s in zip(pg_ranks, splits, strict=True)}


def _gloo_events(  # noqa: PLR0917
    ops: list[dict[str, Any]],
    execs: list[tuple[float, float]],
    ann: dict[Any, _Annotations],
    base_ns: int,
    dist_info: dict[str, Any],
    common: dict[str, Any],
) -> Iterator[dict[str, Any]]:
    ops.sort(key=lambda e: e["ts"])
    paired = len(execs) == len(ops)
    world = dist_info.get("world_size")
    pg_by_size: dict[int, list[list[int]]] = defaultdict(list)
    for pg in dist_info.get("pg_config") or []:
        if isinstance(pg, dict) and isinstance(pg.get("ranks"), list):
            pg_by_size[len(pg["ranks"])].append(pg["ranks"])
    for ordinal, ev in enumerate(ops, start=1):
        args = ev.get("args") or {}
        concrete = args.get("Concrete Inputs") or []
        dims = args.get("Input Dims") or []
        types = args.get("Input type") or []
        out_splits = _int_list(concrete[3]) if len(concrete) > 4 else None
        in_splits = _int_list(concrete[4]) if len(concrete) > 4 else None
        itemsize = DTYPE_BYTES.get(types[0] if types else "", 0)
        out_shape = dims[0] if dims else []
        in_shape = dims[1] if len(dims) > 1 else []
        row_out = math.prod(out_shape[1:]) * itemsize if out_shape else 0
        row_in = math.prod(in_shape[1:]) * itemsize if in_shape else 0
        n = len(in_splits) if in_splits else None
        candidates = pg_by_size.get(n or -1, [])
        if candidates and all(c == candidates[0] for c in candidates):
            pg_ranks: list[int] | None = candidates[0]
        elif n is not None and n == world:
            pg_ranks = list(range(world))
        else:
            pg_ranks = None
        ts = float(ev["ts"])
        layer, phase = _label(ann, (ev.get("pid"), ev.get("tid")), ts)
        if paired:
            start_us, dur_us = execs[ordinal - 1]
            time_kind = "host_call"
        else:
            start_us, dur_us, time_kind = ev["ts"], ev.get("dur", 0), "host_enqueue"
        send = _peers(in_splits, row_in, pg_ranks)
        recv = _peers(out_splits, row_out, pg_ranks)
        start_ns = _ns(base_ns, start_us)
        yield {
            **common,
            "id": f"k{common['rank']}-a2a-{ordinal}-{start_ns}",
            "layer": layer,
            "phase": phase,
            "collective": "all_to_allv" if in_splits else "all_to_all",
            "pg_ranks": pg_ranks,
            "seq": ordinal,
            "start_ns": start_ns,
            "end_ns": start_ns + round(dur_us * 1000),
            "bytes_sent": math.prod(in_shape) * itemsize if in_shape else None,
            "bytes_recv": math.prod(out_shape) * itemsize if out_shape else None,
            "send_bytes_per_peer": send,
            "recv_bytes_per_peer": recv,
            "time_kind": time_kind,
        }


def _nccl_events(
    kernels: list[dict[str, Any]], ann: dict[Any, _Annotations], base_ns: int, common: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    kernels.sort(key=lambda e: e["ts"])
    for ordinal, ev in enumerate(kernels, start=1):
        args = ev["args"]
        coll = str(args.get("Collective name", ""))
        itemsize = DTYPE_BYTES.get(str(args.get("dtype", "")), 0)
        pg_ranks = _int_list(args.get("Process Group Ranks"))
        group_size = args.get("Group size") or (len(pg_ranks) if pg_ranks else 0)
        in_n, out_n = int(args.get("In msg nelems") or 0), int(args.get("Out msg nelems") or 0)
        send = recv = None
        if coll.startswith("all_to_all") and pg_ranks:
            ins, outs = _int_list(args.get("In split size")), _int_list(args.get("Out split size"))
            if ins and outs:
                send = _peers(ins, in_n // max(sum(ins), 1) * itemsize, pg_ranks)
                recv = _peers(outs, out_n // max(sum(outs), 1) * itemsize, pg_ranks)
            elif group_size:
                send = {str(r): in_n // group_size * itemsize for r in pg_ranks}
                recv = {str(r): out_n // group_size * itemsize for r in pg_ranks}
        ts = float(ev["ts"])
        layer, phase = _label(ann, (ev.get("pid"), ev.get("tid")), ts)
        if phase == "other":
            phase = _COLLECTIVE_PHASE.get(coll, "other")
        start_ns = _ns(base_ns, ev["ts"])
        seq = args.get("Seq")
        yield {
            **common,
            "id": f"k{common['rank']}-{args.get('Process Group Name', '')}-{seq or ordinal}-{start_ns}",
            "layer": layer,
            "phase": phase,
            "collective": coll[:40] or "unknown",
            "pg": str(args.get("Process Group Name", "")),
            "pg_ranks": pg_ranks,
            "seq": seq if isinstance(seq, int) else None,
            "start_ns": start_ns,
            "end_ns": start_ns + round(ev.get("dur", 0) * 1000),
            "bytes_sent": in_n * itemsize,
            "bytes_recv": out_n * itemsize,
            "send_bytes_per_peer": send,
            "recv_bytes_per_peer": recv,
            "time_kind": "gpu_kernel",
        }
