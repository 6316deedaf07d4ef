"""The names collectives go by in Kineto traces, across PyTorch and NCCL generations.

One canonical collective per call (``all_to_all``, ``all_to_allv``, ``allreduce``, ``allgather``,
``reduce_scatter``, ``broadcast``, ``reduce``, ``send``, ``recv``, ``barrier``, ``gather``,
``scatter``), whichever evidence names it:

- ``"Collective name"`` args (record_param_comms and, since PyTorch 2.3, the NCCL kernel):
  ``allreduce``, ``_allgather_base``, ``all_to_allv`` …
- profiling titles (``nccl:all_reduce``, ``gloo:all_to_all``, ``nccl:send 0->1``);
- c10d dispatcher ops (``c10d::allreduce_``, ``c10d::_reduce_scatter_base_``, ``c10d::recv_``);
- NCCL kernel names: ``ncclKernel_AllReduce_RING_LL_Sum_float`` (NCCL < 2.19) and
  ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` (≥ 2.19), which also name the algorithm.
"""

from __future__ import annotations

import re

_ALIASES = {
    "all_to_all": "all_to_all",
    "alltoall": "all_to_all",
    "all2all": "all_to_all",
    "all_to_all_single": "all_to_all",
    "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_allv",
    "alltoallv": "all_to_allv",
    "allreduce": "allreduce",
    "all_reduce": "allreduce",
    "allgather": "allgather",
    "all_gather": "allgather",
    "allgather_base": "allgather",
    "all_gather_base": "allgather",
    "allgather_into_tensor": "allgather",
    "all_gather_into_tensor": "allgather",
    "allgatherv": "allgather",
    "reduce_scatter": "reduce_scatter",
    "reducescatter": "reduce_scatter",
    "reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reducescatterv": "reduce_scatter",
    "broadcast": "broadcast",
    "bcast": "broadcast",
    "reduce": "reduce",
    "send": "send",
    "recv": "recv",
    "recv_any_source": "recv",
    "barrier": "barrier",
    "monitored_barrier": "barrier",
    "gather": "gather",
    "scatter": "scatter",
    "sendrecv": "sendrecv",
}
_SUFFIXES = ("_coalesced", "_tensor")
TITLE_PREFIXES = ("nccl:", "gloo:", "mpi:", "ucc:", "xccl:", "hccl:", "rccl:", "mccl:")
TITLE_OF_C10D = {  # how gloo names the work of each c10d op (reduce_scatter runs as allreduces)
    "reduce_scatter": ("reduce_scatter", "allreduce"),
}
COLLECTIVE_PHASE = {
    "allreduce": "allreduce",
    "allgather": "allgather",
    "reduce_scatter": "reducescatter",
    "send": "send",
    "recv": "recv",
}
ALGORITHMS = ("COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS_TREE", "NVLS", "RING", "TREE", "PAT")
_KERNEL_RE = re.compile(r"^(?:ncclKernel|ncclDevKernel)_([A-Za-z]+)(?:_(\w+))?")
_KERNEL_COLL = {
    "AllReduce": "allreduce",
    "AllGather": "allgather",
    "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
    "SendRecv": "sendrecv",
    "AllToAll": "all_to_all",
    "Send": "send",
    "Recv": "recv",
}


def canonical(name: str) -> str | None:
    """A collective's canonical name from any of its spellings (None: not a collective)."""
    key = name.strip().lower()
    for prefix in (*TITLE_PREFIXES, "c10d::"):
        key = key.removeprefix(prefix)
    key = key.split(" ", 1)[0].strip("_")  # "send 0->1", "_allgather_base_"
    found = _ALIASES.get(key)
    for suffix in _SUFFIXES:
        if found is None and key.endswith(suffix):
            key = key.removesuffix(suffix)
            found = _ALIASES.get(key)
    return found


def is_nccl_kernel(name: str) -> bool:
    """HTA's communication-kernel rule: ``^nccl`` or ``ncclKernel`` anywhere (RCCL names alike)."""
    return name.startswith("nccl") or "ncclKernel" in name or "ncclDevKernel" in name


def kernel_collective(name: str) -> tuple[str | None, str | None]:
    """(collective, algorithm) named by an NCCL kernel; (None, None) for ``Generic`` kernels."""
    m = _KERNEL_RE.match(name)
    if m is None:
        return None, None
    coll = _KERNEL_COLL.get(m.group(1))
    rest = (m.group(2) or "").split("_")
    algorithm = next((a for a in ALGORITHMS if "_".join(rest).find(a) >= 0), None)
    return coll, algorithm


def phase_of(collective: str) -> str:
    return COLLECTIVE_PHASE.get(collective, "other")


def is_all_to_all(collective: str) -> bool:
    return collective in ("all_to_all", "all_to_allv")
