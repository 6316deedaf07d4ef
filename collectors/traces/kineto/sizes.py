"""Message sizes and per-peer wire bytes of one collective call, from whichever args carry them.

1. Communication args (``record_param_comms`` since PyTorch ~2.0; the NCCL kernel since 2.3):
   ``In/Out msg nelems`` × ``dtype``, ``In/Out split size`` (dim-0 rows per group rank),
   ``Group size``, ``Process Group Ranks`` (group rank → global rank), ``Src/Dst Rank``.
2. The c10d dispatcher op's shapes (``record_shapes=True``): ``Input Dims`` / ``Input type`` /
   ``Concrete Inputs`` laid out by the op's schema (``c10d::alltoall_base_(output, input, pg,
   output_split_sizes, input_split_sizes, …)``); a tensor list's dtype is not written, so it
   comes from the call's title (``gloo:all_reduce`` carries the tensor) or comm args.
3. A title's own shapes (``gloo:*`` always, ``nccl:*`` with ``record_shapes``): message bytes.

Per-peer bytes are given where the algorithm fixes them: all-to-all(v) (the splits) and send /
recv (one peer). Ring, tree and NVLS collectives are left at their message size: which neighbour
gets the bytes is chosen at run time (NCCL's ring order, gloo's segments), not by the call.
Per-peer maps are keyed by global rank and include the rank itself (its self-copy), as the
probe's are.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from collectors.traces.errors import TraceFormatError
from collectors.traces.schema import dtype_bytes

TRUNCATED = "truncated"
_NUMBER = re.compile(r"-?\d+")
MAX_LIST = 1 << 16  # ranks in one group (a longer list is refused, not allocated)


@dataclass
class Sizes:
    """What the args say about one call; ``problem`` says why bytes are missing."""

    bytes_in: int | None = None
    bytes_out: int | None = None
    send: dict[str, int] | None = None
    recv: dict[str, int] | None = None
    problem: str | None = None
    group_size: int | None = None
    even_split: bool = False

    @property
    def known(self) -> bool:
        return self.bytes_in is not None or self.bytes_out is not None


def int_arg(args: dict[str, Any], key: str) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if type(value) is not int:
        raise TraceFormatError(
            f"Kineto args {key!r} must be an integer, got {type(value).__name__} {str(value)[:40]!r}"
        )
    return value


def int_list(value: Any) -> list[int] | str | None:
    """ "[11, 12]" or [11, 12] → list; ``TRUNCATED`` for Kineto's "[a, …, ..., z]" (> 30 entries)."""
    if value is None:
        return None
    if isinstance(value, list):
        if len(value) > MAX_LIST or not all(type(v) is int for v in value):
            raise TraceFormatError(f"Kineto list arg is not a list of integers: {str(value)[:60]}")
        return value
    if not isinstance(value, str) or len(value) > 16 * MAX_LIST:
        raise TraceFormatError(f"Kineto list arg must be a string list, got {type(value).__name__}")
    if "..." in value:
        return TRUNCATED
    return [int(x) for x in _NUMBER.findall(value)]


def _numel(shape: Any) -> int | None:
    """Elements of one shape ``[d0, d1, …]``, or of a list of shapes (a tensor list)."""
    if not isinstance(shape, list):
        return None
    if all(type(d) is int and d >= 0 for d in shape):
        return math.prod(shape)
    if all(isinstance(s, list) for s in shape):
        parts = [_numel(s) for s in shape]
        return None if not parts or None in parts else sum(p for p in parts if p is not None)
    return None


def comm_args(args: dict[str, Any], collective: str) -> Sizes:
    """Sizes from ``Collective name`` args (record_param_comms, NCCL kernels)."""
    dtype = args.get("dtype")
    itemsize = dtype_bytes(dtype)
    in_n, out_n = int_arg(args, "In msg nelems"), int_arg(args, "Out msg nelems")
    group_size = int_arg(args, "Group size")
    if itemsize is None:
        return Sizes(problem=f"dtype {str(dtype)[:40]!r} unknown", group_size=group_size)
    if in_n is None and out_n is None:
        return Sizes(problem="no message sizes in the args", group_size=group_size)
    sizes = Sizes(
        None if in_n is None else in_n * itemsize,
        None if out_n is None else out_n * itemsize,
        group_size=group_size,
    )
    ranks = int_list(args.get("Process Group Ranks"))
    pg_ranks = ranks if isinstance(ranks, list) and ranks else None
    if collective in ("all_to_all", "all_to_allv"):
        _a2a_from_args(sizes, args, in_n or 0, out_n or 0, itemsize, pg_ranks)
    elif collective == "send":
        _peer(sizes, "send", int_arg(args, "Dst Rank"), sizes.bytes_in)
    elif collective == "recv":
        _peer(sizes, "recv", int_arg(args, "Src Rank"), sizes.bytes_out or sizes.bytes_in)
    return sizes


def _a2a_from_args(  # noqa: PLR0917
    sizes: Sizes, args: dict[str, Any], in_n: int, out_n: int, itemsize: int, pg_ranks: list[int] | None
) -> None:
    ins, outs = int_list(args.get("In split size")), int_list(args.get("Out split size"))
    if TRUNCATED in (ins, outs):
        sizes.problem = "split lists truncated (groups over 30 ranks): per-peer bytes unknown"
        return
    if pg_ranks is None:
        sizes.problem = "no process-group ranks: per-peer bytes unknown"
        return
    if ins and outs and isinstance(ins, list) and isinstance(outs, list):
        sizes.send = rows_to_peers(ins, in_n, itemsize, pg_ranks)
        sizes.recv = rows_to_peers(outs, out_n, itemsize, pg_ranks)
        if sizes.send is None or sizes.recv is None:
            sizes.send = sizes.recv = None
            sizes.problem = "split sizes do not divide the message: per-peer bytes unknown"
        return
    n = sizes.group_size or len(pg_ranks)
    if n != len(pg_ranks) or in_n % n or out_n % n:
        sizes.problem = "group size does not divide the message: per-peer bytes unknown"
        return
    sizes.even_split = True
    sizes.send = {str(r): in_n // n * itemsize for r in pg_ranks}
    sizes.recv = {str(r): out_n // n * itemsize for r in pg_ranks}


def rows_to_peers(splits: list[int], numel: int, itemsize: int, pg_ranks: list[int]) -> dict[str, int] | None:
    """Dim-0 rows per group rank → bytes per global rank (None if they cannot be the message)."""
    total = sum(splits)
    if len(splits) != len(pg_ranks) or min(splits, default=0) < 0:
        return None
    if total == 0:
        return dict.fromkeys(map(str, pg_ranks), 0) if numel == 0 else None
    if numel % total:
        return None
    row = numel // total * itemsize
    return {str(r): s * row for r, s in zip(pg_ranks, splits, strict=True)}


def _peer(sizes: Sizes, side: str, peer: int | None, nbytes: int | None) -> None:
    if peer is None or nbytes is None or peer < 0:
        sizes.problem = sizes.problem or f"{side} without its peer rank: per-peer bytes unknown"
        return
    setattr(sizes, side, {str(peer): nbytes})


# c10d op schemas: (output index, input index, split indices (out, in), peer index)
_C10D = {
    "alltoall_base_": (0, 1, (3, 4), None),
    "alltoall_": (0, 1, None, None),
    "allreduce_": (0, 0, None, None),
    "allreduce_coalesced_": (0, 0, None, None),
    "broadcast_": (0, 0, None, None),
    "reduce_": (0, 0, None, None),
    "allgather_": (0, 1, None, None),
    "_allgather_base_": (0, 1, None, None),
    "allgather_into_tensor_coalesced_": (0, 1, None, None),
    "allgather_coalesced_": (0, 1, None, None),
    "reduce_scatter_": (0, 1, None, None),
    "_reduce_scatter_base_": (0, 1, None, None),
    "reduce_scatter_tensor_coalesced_": (0, 1, None, None),
    "send": (0, 0, None, 2),
    "recv_": (0, 0, None, 2),
    "recv_any_source_": (0, 0, None, None),
    "barrier": (0, 0, None, None),
    "gather_": (0, 1, None, None),
    "scatter_": (0, 1, None, None),
}


@dataclass
class OpShapes:
    """A c10d op's recorded shapes: elements and itemsize of its output and input, its splits."""

    out_numel: int | None
    in_numel: int | None
    out_itemsize: int | None
    in_itemsize: int | None
    out_splits: list[int] | str | None
    in_splits: list[int] | str | None
    peer: int | None
    list_len: int | None  # tensors in an alltoall_ list (its group size)


def c10d_shapes(op: str, args: dict[str, Any]) -> OpShapes | None:
    layout = _C10D.get(op.removeprefix("c10d::"))
    dims, types, concrete = args.get("Input Dims"), args.get("Input type"), args.get("Concrete Inputs")
    if layout is None or not isinstance(dims, list) or not isinstance(types, list):
        return None
    out_i, in_i, splits, peer_i = layout

    def entry(i: int) -> tuple[int | None, int | None]:
        if i >= len(dims) or i >= len(types):
            return None, None
        kind = types[i]
        if kind in ("", None) or (dims[i] == [] and kind == "TensorList"):
            return None, None  # not recorded (nested tensor lists, optional args)
        return _numel(dims[i]), (None if kind == "TensorList" else dtype_bytes(kind))

    out_numel, out_isz = entry(out_i)
    in_numel, in_isz = entry(in_i)
    ci = concrete if isinstance(concrete, list) else []
    # "" is a list the profiler dropped (over 30 entries); "[]" an even split
    out_s = _split_arg(ci[splits[0]]) if splits and len(ci) > splits[1] else None
    in_s = _split_arg(ci[splits[1]]) if splits and len(ci) > splits[1] else None
    peer = None
    if (
        peer_i is not None
        and len(ci) > peer_i
        and isinstance(ci[peer_i], str)
        and ci[peer_i].lstrip("-").isdigit()
    ):
        peer = int(ci[peer_i])
    list_len = (
        len(dims[in_i])
        if op.endswith("alltoall_") and in_i < len(dims) and isinstance(dims[in_i], list)
        else None
    )
    return OpShapes(out_numel, in_numel, out_isz, in_isz, out_s, in_s, peer, list_len)


def _split_arg(value: Any) -> list[int] | str | None:
    return TRUNCATED if value == "" else int_list(value)


def title_bytes(args: dict[str, Any]) -> tuple[int | None, int | None]:
    """(message bytes, itemsize) of a title's recorded tensors (``Input Dims`` × ``Input type``)."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list) or not dims or len(dims) != len(types):
        return None, None
    total, first = 0, None
    for shape, kind in zip(dims, types, strict=True):
        numel, itemsize = _numel(shape), dtype_bytes(kind)
        if numel is None or itemsize is None:
            return None, None
        total += numel * itemsize
        first = first or itemsize
    return total, first
