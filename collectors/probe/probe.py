"""The torch-side probe: wraps ``torch.distributed.all_to_all_single`` and records, per call, the
exact per-peer bytes, the layer and phase, the process group and the host-clock interval.

Usage (3 lines in a training script, after ``init_process_group``)::

    probe = A2AProbe(sink=EventPoster(IngestClient(url, token), run_id)).install()  # posts its rank map
    with probe.phase(layer, "dispatch"):          # or @probe.tag(layer, "dispatch")
        dist.all_to_all_single(out, inp, out_splits, in_splits, group=ep)

Backward: autograd runs the backward all-to-all outside any ``phase`` context. It is recognised
by ``torch._C._current_graph_task_id() != -1`` and attributed to the latest forward call in the
same group whose split lists are the swap of its own (LIFO) → ``dispatch_bwd`` / ``combine_bwd``.
Each call also runs inside ``record_function("moe/layer{L}/{phase}")`` so a Kineto trace of the
same run carries the same labels (``trace_labels=False``: not, when the job names its own).
Only ``torch`` is imported (lazily); no Django.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from collectors.traces.schema import PHASES, phase_label

Sink = Callable[[dict[str, Any]], None]
log = logging.getLogger("collectors.probe.client")  # the poster's logger: one name to configure
_FWD_STACK_LIMIT = 4_096  # forward calls remembered per group for backward attribution


class _Tag(threading.local):
    def __init__(self) -> None:
        self.stack: list[tuple[int | None, str]] = []


class _TimedWork:
    """Wraps the async ``Work`` so the event's end time is taken when the caller waits."""

    def __init__(self, work: Any, finish: Callable[[], None]) -> None:
        self._work, self._finish = work, finish

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        out = self._work.wait(*args, **kwargs)
        self._finish()
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


class A2AProbe:
    """Records every ``all_to_all_single`` as a normalized phase event passed to ``sink``."""

    def __init__(
        self,
        sink: Sink | None = None,
        *,
        rank: int | None = None,
        host: str | None = None,
        local_rank: int | None = None,
        keep: bool = False,
        trace_labels: bool = True,
        report_rank: bool = True,
    ) -> None:
        self.sink = sink
        # the topology's name for this host: FABRICMON_HOST when the machine's own name differs
        self.report_rank = report_rank
        self.rank_map_answer: Any = None
        # False: the probe opens no record_function of its own, so a job's own names (Megatron's,
        # NVTX-like) are the only labels its Kineto trace carries
        self.trace_labels = trace_labels
        self.rank = rank
        self.host = host or os.environ.get("FABRICMON_HOST", "") or socket.gethostname()
        self.local_rank = local_rank
        self.step: int = 0
        self.keep = keep
        self.recorded: list[dict[str, Any]] = []  # only when keep=True (tests, offline dumps)
        self.errors = 0
        self._tag = _Tag()
        self._seq: dict[str, int] = defaultdict(int)
        self._fwd: dict[str, list[tuple[list[int], list[int], int | None, str, int]]] = defaultdict(list)
        self._session = uuid.uuid4().hex[:8]
        self._original: Callable[..., Any] | None = None

    # --- tagging --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, layer: int | None, phase: str) -> Iterator[None]:
        """Tag the all-to-alls issued inside the block with (layer, phase)."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}")
        self._tag.stack.append((layer, phase))
        try:
            yield
        finally:
            self._tag.stack.pop()

    def tag(self, layer: int | None, phase: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator form of ``phase``."""

        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with self.phase(layer, phase):
                    return fn(*args, **kwargs)

            return wrapper

        return deco

    def set_step(self, step: int) -> None:
        self.step = step

    # --- install --------------------------------------------------------------------------------
    def install(self) -> A2AProbe:
        """Wrap ``all_to_all_single``; with an ``EventPoster`` sink and ``report_rank`` (default),
        also post this rank's rank-map entry once the process group is up."""
        import torch.distributed as dist  # noqa: PLC0415
        import torch.distributed.distributed_c10d as c10d  # noqa: PLC0415

        if self._original is None:
            self._original = c10d.all_to_all_single
            wrapped = self._wrap(self._original)
            dist.all_to_all_single = wrapped
            c10d.all_to_all_single = wrapped
            if self.report_rank and (self.rank is not None or dist.is_initialized()):
                self.post_rank_map()
        return self

    def uninstall(self) -> None:
        import torch.distributed as dist  # noqa: PLC0415
        import torch.distributed.distributed_c10d as c10d  # noqa: PLC0415

        if self._original is not None:
            dist.all_to_all_single = self._original
            c10d.all_to_all_single = self._original
            self._original = None

    def rank_map_entry(self, nic: str | None = None) -> dict[str, Any]:
        """This process's rank-map line: global rank, host and local rank (the GPU's index on the
        host), and the NIC when one is named (argument or ``FABRICMON_NIC``). The server places it
        on the run's fabric: host + local rank → that GPU's NIC and the rail-leaf port it plugs into.

        (It used to add the first interface of ``/sys/class/net`` as the NIC — ``eth0``, a name no
        topology has — and left the local rank empty without torchrun's ``LOCAL_RANK``, so an
        ``mp.spawn`` or ``srun`` job's map placed nothing: 0 % coverage, without a word.)"""
        import torch.distributed as dist  # noqa: PLC0415

        entry: dict[str, Any] = {
            "rank": dist.get_rank() if self.rank is None else self.rank,
            "host": self.host,
            "local_rank": self.local_rank if self.local_rank is not None else local_rank_from_env(),
        }
        nic = nic or os.environ.get("FABRICMON_NIC", "")
        if nic:
            entry["nic"] = nic
        return entry

    def post_rank_map(self, client: Any = None, run_id: int | None = None) -> Any:
        """POST this rank's entry to the run (``install`` does it when the sink is an ``EventPoster``).
        Never raises: the server's answer — its ``check`` says which ranks are placed, which are
        missing and why — is kept in ``rank_map_answer`` and a refusal logged with its reasons."""
        client = client if client is not None else getattr(self.sink, "client", None)
        run_id = run_id if run_id is not None else getattr(self.sink, "run_id", None)
        if client is None or run_id is None:
            return None
        try:
            status, body = client.post_rank_map(run_id, [self.rank_map_entry()])
        except Exception as exc:  # unreachable server, no process group: training goes on
            log.warning("probe: rank map not posted: %s", exc)
            return None
        self.rank_map_answer = body
        if status != 200:
            reasons = "; ".join(r.get("reason", "") for r in (body or {}).get("rejected", [])) if isinstance(
                body, dict) else str(body)
            log.warning("probe: rank map refused (%s): %s", status, reasons or body)
        return body

    # --- the wrapper ----------------------------------------------------------------------------
    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        @functools.wraps(original)
        def all_to_all_single(  # noqa: PLR0917 - torch's own signature
            output: Any,
            input: Any,
            output_split_sizes: Any = None,
            input_split_sizes: Any = None,
            group: Any = None,
            async_op: bool = False,
        ) -> Any:
            try:
                event = probe._describe(output, input, output_split_sizes, input_split_sizes, group)
            except Exception:  # the probe must never break training
                probe.errors += 1
                event = None
            if event is None:
                return original(output, input, output_split_sizes, input_split_sizes, group, async_op)
            from torch.autograd.profiler import record_function  # noqa: PLC0415

            start_ns = time.time_ns()
            label = phase_label(event["layer"], event["phase"])
            with record_function(label) if probe.trace_labels else contextlib.nullcontext():
                work = original(output, input, output_split_sizes, input_split_sizes, group, async_op)

            def finish() -> None:
                event["start_ns"], event["end_ns"] = start_ns, time.time_ns()
                probe._emit(event)

            if async_op and work is not None:
                return _TimedWork(work, finish)
            finish()
            return work

        return all_to_all_single

    def _describe(
        self, output: Any, input: Any, out_splits: Any, in_splits: Any, group: Any
    ) -> dict[str, Any]:
        import torch  # noqa: PLC0415
        import torch.distributed as dist  # noqa: PLC0415
        import torch.distributed.distributed_c10d as c10d  # noqa: PLC0415

        pg = group if group is not None else c10d._get_default_group()
        pg_ranks = list(dist.get_process_group_ranks(pg))
        n = len(pg_ranks)
        ins = _splits(in_splits, input.shape[0], n)
        outs = _splits(out_splits, output.shape[0], n)
        row_in = math.prod(input.shape[1:]) * input.element_size()
        row_out = math.prod(output.shape[1:]) * output.element_size()
        try:
            pg_name = str(c10d._get_process_group_name(pg))
        except Exception:
            pg_name = str(id(pg))
        self._seq[pg_name] += 1
        seq = self._seq[pg_name]
        rank = dist.get_rank() if self.rank is None else self.rank
        layer, phase, step = None, "other", self.step
        if torch._C._current_graph_task_id() != -1:  # inside autograd backward
            stack = self._fwd[pg_name]
            for i in range(len(stack) - 1, -1, -1):
                f_ins, f_outs, f_layer, f_phase, f_step = stack[i]
                if f_ins == outs and f_outs == ins:
                    del stack[i]
                    layer, phase, step = f_layer, f_phase + "_bwd", f_step
                    break
        elif self._tag.stack:
            layer, phase = self._tag.stack[-1]
            # pushed even under no_grad: autograd.Function.forward runs with grad disabled
            if phase in ("dispatch", "combine"):
                stack = self._fwd[pg_name]
                stack.append((ins, outs, layer, phase, step))
                if len(stack) > _FWD_STACK_LIMIT:
                    del stack[0]
        return {
            "id": f"{self._session}-{rank}-{pg_name}-{seq}",
            "rank": rank,
            "host": self.host,
            "step": step,
            "layer": layer,
            "phase": phase,
            "collective": "all_to_all_single",
            "pg": pg_name,
            "pg_ranks": pg_ranks,
            "seq": seq,
            # per pg_ranks entry (collectors.probe.peers: posted as maps to a server without them)
            "send_bytes_per_pg_rank": [c * row_in for c in ins],
            "recv_bytes_per_pg_rank": [c * row_out for c in outs],
            "source": "probe",
            "time_kind": "host_call",
        }

    def _emit(self, event: dict[str, Any]) -> None:
        if self.keep:
            self.recorded.append(event)
        if self.sink is not None:
            try:
                self.sink(event)
            except Exception:
                self.errors += 1


def _splits(splits: Any, rows: int, n: int) -> list[int]:
    if splits is None or len(splits) == 0:
        return [rows // n] * n
    return [int(s) for s in splits]


# Where launchers put a process's index on its host: torchrun, Slurm's srun, Open MPI, MPICH/Intel MPI.
LOCAL_RANK_VARS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")


def local_rank_from_env() -> int | None:
    """The process's local rank from the first launcher variable that holds one (None: none does)."""
    for name in LOCAL_RANK_VARS:
        value = os.environ.get(name, "").strip()
        if value.isascii() and value.isdigit():
            return int(value)
    return None
