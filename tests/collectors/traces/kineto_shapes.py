"""Hand-written Kineto traces in the documented shapes of each PyTorch/NCCL generation
(job_events.md §2.4): small builders, so each test states only what its generation has."""

from __future__ import annotations

import io
import json
from typing import Any

BASE = 1_790_857_026_000_000_000


def trace(events: list[dict[str, Any]], rank: int | None = 0, **header: Any) -> io.BytesIO:
    doc: dict[str, Any] = {"schemaVersion": 1, "baseTimeNanoseconds": BASE, **header}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 4}
    doc["traceEvents"] = events
    return io.BytesIO(json.dumps(doc).encode())


def x(cat: str, name: str, ts: float, dur: float, tid: int = 1, pid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def comm_args(coll: str, n_in: int, n_out: int, dtype: str = "Float", **more: Any) -> dict[str, Any]:
    return {
        "Collective name": coll,
        "In msg nelems": n_in,
        "Out msg nelems": n_out,
        "Group size": 4,
        "dtype": dtype,
        "In split size": "[]",
        "Out split size": "[]",
        "Process Group Name": "0",
        "Process Group Ranks": "[0, 1, 2, 3]",
        **more,
    }


def nccl_call(
    ts: float,
    coll: str,
    title: str,
    kernel: str,
    corr: int,
    *,
    rpc: dict[str, Any] | None,
    kernel_args: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One NCCL collective: c10d op ⊃ record_param_comms ⊃ nccl: title ⊃ cudaLaunchKernel → kernel."""
    out = [x("cpu_op", f"c10d::{coll}", ts, 50, **{"External id": corr})]
    if rpc is not None:
        out.append(x("cpu_op", "record_param_comms", ts + 1, 40, **rpc))
    out.append(x("user_annotation", title, ts + 2, 30, **{"External id": corr + 1}))
    out.append(x("cuda_runtime", "cudaLaunchKernel", ts + 3, 5, correlation=corr))
    out.append(x("kernel", kernel, ts + 100, 200, pid=0, tid=7, correlation=corr, **(kernel_args or {})))
    return out
