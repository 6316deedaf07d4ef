"""One call → one normalized event: collective, sizes, process group, time and labels.

Time: the GPU kernel when the call has one (``gpu_kernel``), else its GPU title; for gloo the
worker thread's execution (``host_call``); only when nothing better exists the CPU op's own span,
which for NCCL and async gloo is the enqueue (``host_enqueue``). Each event says which.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from collectors.traces.kineto.calls import Call
from collectors.traces.kineto.labels import Spans, Steps
from collectors.traces.kineto.sizes import (
    TRUNCATED,
    OpShapes,
    Sizes,
    c10d_shapes,
    comm_args,
    int_list,
    rows_to_peers,
    title_bytes,
)
from collectors.traces.kineto.vocab import canonical, is_all_to_all, kernel_collective, phase_of


@dataclass
class Context:
    """What the file's header says, and its step / label / module spans."""

    rank: int
    rank_from: str
    host: str
    base_ns: int
    world: int | None
    pgs: list[tuple[str, list[int]]]
    steps: Steps
    labels: Spans
    modules: Spans
    module_phase: dict[int, str] = field(default_factory=dict)  # id(call) → phase by order in module
    ordinals: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass
class Described:
    event: dict[str, Any] | None
    collective: str
    evidence: str
    message_bytes: int | None
    problem: str | None
    algorithm: str | None


def describe(call: Call, index: int, ctx: Context) -> Described:
    coll = call.collective()
    comm = next(
        (
            s
            for s in (*call.cpu, *call.kernels)
            if "Collective name" in s.args
            and s.what in ("rpc", "kernel")
            and ("In msg nelems" in s.args or "Out msg nelems" in s.args)
        ),
        None,
    )
    algorithm = next((a for k in call.kernels for a in [kernel_collective(k.name)[1]] if a), None)
    if coll is None:
        return Described(
            None, "unknown", _evidence(call, comm), None, "calls of an unknown collective", algorithm
        )
    pg, pg_ranks, seq = "", None, None
    if comm is not None:
        sizes = comm_args(comm.args, coll)
        pg = str(comm.args.get("Process Group Name", ""))[:64]
        ranks = int_list(comm.args.get("Process Group Ranks"))
        pg_ranks = ranks if isinstance(ranks, list) and ranks else None
        seq = next((v for sp in (*call.cpu, *call.kernels) if type(v := sp.args.get("Seq")) is int), None)
        named = comm.args.get("Collective name")
        coll = canonical(named) or coll if isinstance(named, str) else coll
    elif (op := call.first("c10d")) is not None and (shapes := c10d_shapes(op.name, op.args)) is not None:
        pg, pg_ranks = _infer_group(_group_hint(op.name, shapes), ctx)
        sizes = _op_sizes(op.name, shapes, coll, _dtype_hint(call), pg_ranks)
        if is_all_to_all(coll) and isinstance(shapes.in_splits, list) and shapes.in_splits:
            coll = "all_to_allv"
    else:
        sizes = _title_sizes(call)
    start_us, end_us, time_kind = _interval(call)
    start_ns = ctx.base_ns + start_us
    end_ns = max(ctx.base_ns + end_us, start_ns)
    layer, phase, step = _labels(call, coll, ctx)
    family = (pg, "a2a" if is_all_to_all(coll) else coll)
    ctx.ordinals[family] = ordinal = ctx.ordinals.get(family, 0) + 1
    event: dict[str, Any] = {
        "id": f"k{ctx.rank}-{pg or '-'}-{coll}-{ordinal}-{start_ns}"[:80],
        "rank": ctx.rank,
        "host": ctx.host,
        "step": step,
        "layer": layer,
        "phase": phase,
        "collective": coll,
        "pg": pg,
        "pg_ranks": pg_ranks,
        "seq": seq if seq is not None and seq >= 0 else ordinal,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "source": "kineto",
        "time_kind": time_kind,
    }
    _put_bytes(event, sizes)
    message = sizes.bytes_in if sizes.bytes_in is not None else sizes.bytes_out
    return Described(event, coll, _evidence(call, comm), message, sizes.problem, algorithm)


def _evidence(call: Call, comm: Any) -> str:
    if comm is not None:
        return "record_param_comms" if comm.what == "rpc" else "kernel args"
    if call.first("c10d") is not None:
        return "c10d op"
    if call.cpu or call.gpu_titles or call.execs:
        return "annotation"
    return "kernel name"


def _put_bytes(event: dict[str, Any], sizes: Sizes) -> None:
    if sizes.send is not None:
        event["send_bytes_per_peer"] = sizes.send
    else:
        event["bytes_sent"] = sizes.bytes_in
    if sizes.recv is not None:
        event["recv_bytes_per_peer"] = sizes.recv
    else:
        event["bytes_recv"] = sizes.bytes_out


def _interval(call: Call) -> tuple[int, int, str]:
    for spans, kind in (
        (call.kernels, "gpu_kernel"),
        (call.gpu_titles, "gpu_kernel"),
        (call.execs, "host_call"),
    ):
        if spans:
            return min(s.ts for s in spans), max(s.end for s in spans), kind
    gloo = next((s for s in call.cpu if s.what == "title" and s.name.startswith("gloo:")), None)
    if gloo is not None:
        return gloo.ts, gloo.end, "host_call"
    root = call.root
    assert root is not None
    return root.ts, root.end, "host_enqueue"


def _labels(call: Call, coll: str, ctx: Context) -> tuple[int | None, str, int | None]:
    anchor = call.root or (call.kernels or call.gpu_titles or call.execs)[0]
    gpu = call.root is None
    found = ctx.labels.at(anchor.pid, anchor.tid, anchor.ts)
    module = ctx.modules.at(anchor.pid, anchor.tid, anchor.ts)
    layer, phase = found[2] if found else (None, None)
    if layer is None and module is not None:
        layer = module[2]
    # a label names the phase of an all-to-all; other collectives keep their own (a TP allgather
    # inside "dispatch" is still an allgather)
    phase = (phase or ctx.module_phase.get(id(call)) or "other") if is_all_to_all(coll) else phase_of(coll)
    return layer, phase, ctx.steps.at(anchor.ts, gpu=gpu)


def order_in_modules(calls: list[Call], ctx: Context) -> None:
    """Unlabelled all-to-alls inside one MoE module span: the last is the combine, the earlier
    ones the dispatch (DeepSpeed/Tutel: 2 per layer; Megatron: tokens, probs, then combine)."""
    groups: dict[tuple[Any, ...], list[Call]] = {}
    for call in calls:
        root = call.root
        if root is None or not is_all_to_all(call.collective() or ""):
            continue
        if ctx.labels.at(root.pid, root.tid, root.ts) is not None:
            continue
        module = ctx.modules.at(root.pid, root.tid, root.ts)
        if module is not None:
            groups.setdefault((root.pid, root.tid, module[0], module[1]), []).append(call)
    for members in groups.values():
        for i, call in enumerate(members):
            ctx.module_phase[id(call)] = (
                "combine" if i == len(members) - 1 and len(members) > 1 else "dispatch"
            )


def _group_hint(op: str, s: OpShapes) -> int | None:
    if isinstance(s.in_splits, list) and s.in_splits:
        return len(s.in_splits)
    if s.list_len:
        return s.list_len
    if s.in_numel and s.out_numel and op.endswith(("_allgather_base_", "_reduce_scatter_base_")):
        big, small = max(s.in_numel, s.out_numel), min(s.in_numel, s.out_numel)
        return big // small if small and big % small == 0 else None
    return None


def _infer_group(n: int | None, ctx: Context) -> tuple[str, list[int] | None]:
    """A c10d op names no group: the one of its size in ``pg_config`` (if the candidates agree on
    their ranks), else the whole world when the sizes match."""
    candidates = [(name, ranks) for name, ranks in ctx.pgs if n is None or len(ranks) == n]
    if candidates and all(r == candidates[0][1] for _, r in candidates):
        return (candidates[0][0] if len(candidates) == 1 else ""), candidates[0][1]
    if ctx.world and (n is None or n == ctx.world) and not ctx.pgs:
        return "", list(range(ctx.world))
    return "", None


def _dtype_hint(call: Call) -> int | None:
    for s in (*call.execs, *call.cpu):
        if s.what == "title":
            _, itemsize = title_bytes(s.args)
            if itemsize:
                return itemsize
    return None


def _op_sizes(op: str, s: OpShapes, coll: str, hint: int | None, pg_ranks: list[int] | None) -> Sizes:
    isz_in, isz_out = s.in_itemsize or hint, s.out_itemsize or hint
    b_in = s.in_numel * isz_in if s.in_numel is not None and isz_in else None
    b_out = s.out_numel * isz_out if s.out_numel is not None and isz_out else None
    n = len(pg_ranks) if pg_ranks else None
    if op.endswith("::allgather_") and b_out is None and b_in is not None and n:
        b_out = n * b_in
    if op.endswith("::reduce_scatter_") and b_in is None and b_out is not None and n:
        b_in = n * b_out
    sizes = Sizes(b_in, b_out, group_size=n)
    if b_in is None and b_out is None:
        sizes.problem = "c10d op without recorded shapes or dtype (profile with record_shapes=True)"
    elif is_all_to_all(coll):
        _a2a_peers(sizes, s, isz_in, isz_out, pg_ranks)
    elif coll in ("send", "recv") and s.peer is not None:
        peer = pg_ranks[s.peer] if pg_ranks and 0 <= s.peer < len(pg_ranks) else s.peer
        if coll == "send":
            sizes.send, sizes.bytes_out = {str(peer): b_in or 0}, None
        else:
            sizes.recv, sizes.bytes_in = {str(peer): b_out or b_in or 0}, None
    return sizes


def _a2a_peers(
    sizes: Sizes, s: OpShapes, isz_in: int | None, isz_out: int | None, pg_ranks: list[int] | None
) -> None:
    if pg_ranks is None:
        sizes.problem = "process group not named by the trace: per-peer bytes unknown"
        return
    if TRUNCATED in (s.in_splits, s.out_splits):
        sizes.problem = "split lists dropped by the profiler (over 30 ranks): per-peer bytes unknown"
        return
    n = len(pg_ranks)
    if isinstance(s.in_splits, list) and s.in_splits and isinstance(s.out_splits, list) and s.out_splits:
        sizes.send = rows_to_peers(s.in_splits, s.in_numel or 0, isz_in or 0, pg_ranks)
        sizes.recv = rows_to_peers(s.out_splits, s.out_numel or 0, isz_out or 0, pg_ranks)
    elif (
        sizes.bytes_in is not None
        and sizes.bytes_out is not None
        and sizes.bytes_in % n == 0 == sizes.bytes_out % n
    ):
        sizes.even_split = True
        sizes.send = {str(r): sizes.bytes_in // n for r in pg_ranks}
        sizes.recv = {str(r): sizes.bytes_out // n for r in pg_ranks}
    if sizes.send is None or sizes.recv is None:
        sizes.send = sizes.recv = None
        sizes.problem = "all-to-all splits do not match its tensors: per-peer bytes unknown"


def _title_sizes(call: Call) -> Sizes:
    for s in (*call.cpu, *call.gpu_titles, *call.execs):
        nbytes, _ = title_bytes(s.args)
        if nbytes is not None:
            return Sizes(nbytes, nbytes if not is_all_to_all(call.collective() or "") else None)
    if call.kernels and not (call.cpu or call.gpu_titles):
        return Sizes(problem="NCCL kernels without collective args (PyTorch < 2.3): sizes unknown")
    return Sizes(problem="annotations without message sizes (profile with record_shapes=True)")
