"""Group a file's collective evidence into calls: one call = one collective seen by this rank.

::

    CPU thread   c10d::allreduce_ ─┬─ record_param_comms ── nccl:all_reduce ── cudaLaunchKernel ─┐
                                   │                                         (correlation 6047)  │
    GPU stream                     └────── External id ───── gpu nccl:all_reduce ── ncclDevKernel_AllReduce…
    gloo thread                                      gloo:all_reduce  (paired in order, by tensor shapes)

- CPU evidence on one thread nests: a c10d op, the ``record_param_comms`` inside it and the
  ``nccl:``/``gloo:`` title opened inside it are one call (its root is the outermost span).
- A GPU kernel joins the call whose CPU span contains its launch (``correlation`` → the
  ``cudaLaunchKernel`` event), else the CPU evidence with its ``External id``; a kernel linked to
  nothing is a call of its own (GPU-only traces).
- A GPU title (``gpu_user_annotation nccl:*``) joins by ``External id``, or the kernel it spans.
- gloo runs each collective on a worker thread (``gloo:all_reduce`` there is the real execution):
  those titles are paired with the c10d ops, in order per collective, matching tensor shapes.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from collectors.traces.kineto.events import Evidence, Span
from collectors.traces.kineto.labels import Spans
from collectors.traces.kineto.vocab import canonical, kernel_collective

_EPS_NS = 1_000  # a worker's title may be stamped a hair before the op that enqueued it


@dataclass
class Call:
    """The evidence of one collective call: CPU spans (root first), GPU kernels and titles, and
    the gloo worker titles that executed it."""

    cpu: list[Span] = field(default_factory=list)
    kernels: list[Span] = field(default_factory=list)
    gpu_titles: list[Span] = field(default_factory=list)
    execs: list[Span] = field(default_factory=list)

    @property
    def root(self) -> Span | None:
        return self.cpu[0] if self.cpu else None

    def first(self, what: str) -> Span | None:
        return next((s for s in self.cpu if s.what == what), None)

    def collective(self) -> str | None:
        """Comm args first (they name the real collective), then op, title, kernel name."""
        for span in (*self.cpu, *self.kernels):
            name = span.args.get("Collective name")
            if isinstance(name, str) and canonical(name):
                return canonical(name)
        for span in (*self.cpu, *self.gpu_titles, *self.execs):
            if span.collective:
                return span.collective
        for k in self.kernels:
            coll, _ = kernel_collective(k.name)
            if coll:
                return coll
        return None

    def sort_key(self) -> tuple[int, int]:
        first = self.root or (self.kernels or self.gpu_titles or self.execs)[0]
        return first.ts, first.index


def build_calls(ev: Evidence, world: int) -> tuple[list[Call], list[Span]]:
    """Calls in time order, and the worker titles no call claimed."""
    cpu = [s for s in ev.spans if s.what in ("c10d", "rpc", "title")]
    calls, execs = _nest_cpu(cpu)
    unclaimed = _pair_execs(calls, execs, world)
    _link_kernels(calls, [s for s in ev.spans if s.what == "kernel"], ev.launches)
    _link_gpu_titles(calls, [s for s in ev.spans if s.what == "gpu_title"])
    calls.sort(key=Call.sort_key)
    return calls, unclaimed


def _nest_cpu(spans: list[Span]) -> tuple[list[Call], list[Span]]:
    by_thread: dict[tuple[Any, Any], list[Span]] = defaultdict(list)
    for s in spans:
        by_thread[(s.pid, s.tid)].append(s)
    calls: list[Call] = []
    execs: list[Span] = []
    for thread in by_thread.values():
        thread.sort(key=lambda s: (s.ts, -s.dur, s.index))
        has_ops = any(s.what != "title" for s in thread)
        current: Call | None = None
        for s in thread:
            root = current.root if current else None
            if root is not None and s.ts <= root.end and _compatible(current, s):
                current.cpu.append(s)  # type: ignore[union-attr]
                continue
            if s.what == "title" and not has_ops and s.name.startswith("gloo:"):
                execs.append(s)  # a gloo worker thread: executions, paired below
                current = None
                continue
            current = Call(cpu=[s])
            calls.append(current)
    return calls, execs


def _compatible(call: Call | None, span: Span) -> bool:
    if call is None:
        return False
    mine = call.collective()
    theirs = span.collective or canonical(str(span.args.get("Collective name", "")))
    return mine is None or theirs is None or mine == theirs or {mine, theirs} <= {"all_to_all", "all_to_allv"}


def _exec_shape(span: Span) -> Any:
    dims = span.args.get("Input Dims")
    return repr(dims) if isinstance(dims, list) else None


# which input of a c10d op a gloo worker's title shows, and whether it is one tensor (wrapped)
_EXEC_INPUT = {
    "c10d::allreduce_": (0, False),
    "c10d::broadcast_": (0, False),
    "c10d::reduce_": (0, False),
    "c10d::allgather_": (1, False),
    "c10d::_allgather_base_": (1, True),
    "c10d::alltoall_": (1, False),
    "c10d::alltoall_base_": (1, True),
    "c10d::_reduce_scatter_base_": (1, True),
}


def _expected(call: Call, world: int) -> tuple[str, Any, int]:
    """(title collective, tensor shapes its worker titles show, how many) for one c10d call;
    gloo runs a reduce-scatter as allreduces (one per input tensor of a list)."""
    root = call.first("c10d")
    assert root is not None
    dims = root.args.get("Input Dims")
    coll = call.collective() or ""
    if not isinstance(dims, list):
        return coll, None, 1
    if root.name == "c10d::reduce_scatter_":
        shape = repr(dims[0]) if dims and isinstance(dims[0], list) else None
        return "allreduce", shape, max(world, 1)
    if root.name == "c10d::_reduce_scatter_base_":
        coll = "allreduce"
    index, wrap = _EXEC_INPUT.get(root.name, (None, False))
    if index is None or index >= len(dims):
        return coll, None, 1
    return coll, repr([dims[index]] if wrap else dims[index]), 1


def _pair_execs(calls: list[Call], execs: list[Span], world: int) -> list[Span]:
    queues: dict[str, deque[Span]] = defaultdict(deque)
    for s in sorted(execs, key=lambda s: (s.ts, s.index)):
        queues[s.collective or ""].append(s)
    for call in sorted(calls, key=Call.sort_key):
        root = call.first("c10d")
        if root is None or any(s.name.startswith("gloo:") for s in call.cpu):
            continue  # not a gloo op, or executed on this very thread (send/recv)
        coll, shape, count = _expected(call, world)
        queue = queues.get(coll)
        if queue:
            call.execs.extend(_take(queue, root.ts - _EPS_NS, shape, count))
    return [s for q in queues.values() for s in q]


def _take(queue: deque[Span], after: int, shape: Any, count: int) -> list[Span]:
    """The first ``count`` titles starting after ``after`` (matching ``shape`` when known)."""
    taken: list[Span] = []
    for s in list(queue):
        if len(taken) >= count:
            break
        if s.ts < after or (shape is not None and _exec_shape(s) != shape):
            continue
        taken.append(s)
    for s in taken:
        queue.remove(s)
    return taken


def _link_kernels(calls: list[Call], kernels: list[Span], launches: dict[Any, tuple[Any, Any, int]]) -> None:
    roots = Spans((c.root.pid, c.root.tid, c.root.ts, c.root.end, c) for c in calls if c.root)
    by_ext: dict[Any, Call] = {}
    for c in calls:
        for s in c.cpu:
            if s.ext_id() is not None:
                by_ext.setdefault(s.ext_id(), c)
    for k in sorted(kernels, key=lambda s: (s.ts, s.index)):
        owner = None
        launch = launches.get(k.args.get("correlation"))
        if launch is not None:
            hit = roots.at(launch[0], launch[1], launch[2])
            owner = hit[2] if hit else None
        if owner is None and k.ext_id() is not None:
            owner = by_ext.get(k.ext_id())
        if owner is None:
            calls.append(Call(kernels=[k]))
        else:
            owner.kernels.append(k)


def _link_gpu_titles(calls: list[Call], titles: list[Span]) -> None:
    by_ext: dict[Any, Call] = {}
    for c in calls:
        for s in c.cpu:
            if s.what == "title" and s.ext_id() is not None:
                by_ext.setdefault(s.ext_id(), c)
    gpu_only = Spans((k.pid, k.tid, k.ts, k.end, c) for c in calls if not c.cpu for k in c.kernels[:1])
    for t in titles:
        owner = by_ext.get(t.ext_id()) if t.ext_id() is not None else None
        if owner is None:
            hit = gpu_only.at(t.pid, t.tid, t.end)
            inside = hit is not None and hit[0] >= t.ts
            owner = hit[2] if inside and hit is not None else None
        if owner is None:
            calls.append(Call(gpu_titles=[t]))
        else:
            owner.gpu_titles.append(t)
