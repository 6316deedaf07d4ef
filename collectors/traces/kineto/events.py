"""One pass over a Kineto trace's events: keep what speaks of collectives, steps and phases.

Events are typed records decoded in C (``KinetoEvent``; ``args`` stays raw bytes and is decoded
only for the few events kept). Kept, as small ``Span`` records:

- collective evidence: NCCL kernels, ``record_param_comms``, c10d ops, ``nccl:``/``gloo:`` titles
  on CPU and GPU, kernel launches (``correlation`` → launching thread and time);
- context: ``ProfilerStep#N``, phase labels (``moe/layer3/dispatch``, NVTX-like names), MoE module
  spans (``nn.Module: MoELayer_3``), backward spans (``autograd::engine::evaluate_function``).

Everything else is counted by category in the report's "ignored" section.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson

from collectors.traces.errors import TraceFormatError
from collectors.traces.kineto.labels import label_of, module_layer
from collectors.traces.kineto.vocab import TITLE_PREFIXES, canonical, is_nccl_kernel


class KinetoEvent(msgspec.Struct):
    """The fields of a Chrome-trace event the importer reads; the rest is skipped unparsed."""

    ph: str = ""
    name: str = ""
    cat: str = ""
    ts: msgspec.Raw = msgspec.Raw(b"")  # µs with ns decimals: converted exactly, only when kept
    dur: msgspec.Raw = msgspec.Raw(b"")
    pid: int | str | None = None
    tid: int | str | None = None
    args: msgspec.Raw = msgspec.Raw(b"")


LAUNCHES = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "hipLaunchKernel",
        "hipExtLaunchKernel",
        "hipModuleLaunchKernel",
        "cudaLaunchCooperativeKernel",
    }
)
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_BACKWARD = "autograd::engine::evaluate_function:"


@dataclass
class Span:
    """One kept event: what it is, where (pid, tid) and when (µs as written), and its args."""

    what: str  # kernel | rpc | c10d | title | gpu_title
    name: str
    collective: str | None
    pid: Any
    tid: Any
    ts: int  # ns since the trace's base (or the epoch), as written
    dur: int
    args: dict[str, Any]
    index: int  # position in the file (stable order for equal times)

    @property
    def end(self) -> int:
        return self.ts + self.dur

    def ext_id(self) -> Any:
        return self.args.get("External id")


@dataclass
class Evidence:
    """Everything kept from one file, plus the counts of what was ignored."""

    spans: list[Span] = field(default_factory=list)
    launches: dict[Any, tuple[Any, Any, int]] = field(default_factory=dict)  # correlation → (pid, tid, ts)
    steps: list[tuple[int, int, int, Any]] = field(default_factory=list)  # (ts, end, step, pid)
    labels: list[tuple[Any, Any, int, int, int | None, str]] = field(default_factory=list)
    modules: list[tuple[Any, Any, int, int, int]] = field(default_factory=list)
    backward: list[tuple[Any, Any, int, int]] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)
    unusable: Counter[str] = field(default_factory=Counter)
    seen: int = 0

    def add(self, batch: list[KinetoEvent]) -> None:
        for ev in batch:
            self.seen += 1
            if ev.ph != "X":
                self.ignored[_PH_NAMES.get(ev.ph, f"events of phase type {ev.ph!r}")] += 1
                continue
            cat, name = ev.cat, ev.name
            handler = _BY_CAT.get(cat)
            if handler is None:
                self.ignored[f"{cat or 'uncategorised'} events"] += 1
            else:
                handler(self, ev, cat, name)

    # -- per category ---------------------------------------------------------------------------
    def _kernel(self, ev: KinetoEvent, cat: str, name: str) -> None:
        if is_nccl_kernel(name):
            self._keep("kernel", ev, None)
        else:
            self.ignored["GPU kernels (compute)"] += 1

    def _runtime(self, ev: KinetoEvent, cat: str, name: str) -> None:
        if name not in LAUNCHES:
            self.ignored[f"{cat} calls"] += 1
            return
        corr = _args(ev).get("correlation")
        if corr is not None:
            self.launches[corr] = (ev.pid, ev.tid, _time(ev.ts, "ts", ev))

    def _cpu_op(self, ev: KinetoEvent, cat: str, name: str) -> None:
        if name == "record_param_comms":
            self._keep("rpc", ev, None)
        elif name.startswith("c10d::"):
            coll = canonical(name)
            if coll is None:
                self.ignored["c10d ops that are not collectives"] += 1
            else:
                self._keep("c10d", ev, coll)
        elif name.startswith(_BACKWARD):
            self.backward.append((ev.pid, ev.tid, _time(ev.ts, "ts", ev), _end(ev)))
            self.ignored["CPU ops"] += 1
        else:
            self.ignored["CPU ops"] += 1

    def _annotation(self, ev: KinetoEvent, cat: str, name: str) -> None:
        gpu = cat == "gpu_user_annotation"
        if name.startswith(TITLE_PREFIXES):
            coll = canonical(name)
            if coll is None:
                self.unusable[f"{name.split(':', 1)[0]}: titles of collectives not known ({name[:40]})"] += 1
            else:
                self._keep("gpu_title" if gpu else "title", ev, coll)
            return
        m = _STEP.match(name)
        if m is not None:
            if not gpu:
                self.steps.append((_time(ev.ts, "ts", ev), _end(ev), int(m.group(1)), ev.pid))
            return
        self._label(ev, name, "annotations")

    def _python(self, ev: KinetoEvent, cat: str, name: str) -> None:
        layer = module_layer(name)
        if layer is not None:
            self.modules.append((ev.pid, ev.tid, _time(ev.ts, "ts", ev), _end(ev), layer))
            return
        self._label(ev, name, "python functions")

    def _label(self, ev: KinetoEvent, name: str, kind: str) -> None:
        found = label_of(name)
        if found is None:
            self.ignored[kind] += 1
        else:
            self.labels.append((ev.pid, ev.tid, _time(ev.ts, "ts", ev), _end(ev), *found))

    def _keep(self, what: str, ev: KinetoEvent, collective: str | None) -> None:
        self.spans.append(
            Span(
                what,
                ev.name,
                collective,
                ev.pid,
                ev.tid,
                _time(ev.ts, "ts", ev),
                _duration(ev),
                _args(ev),
                len(self.spans),
            )
        )


_BY_CAT = {
    "kernel": Evidence._kernel,
    "Kernel": Evidence._kernel,
    "cuda_runtime": Evidence._runtime,
    "cuda_driver": Evidence._runtime,
    "Runtime": Evidence._runtime,
    "cpu_op": Evidence._cpu_op,
    "Operator": Evidence._cpu_op,
    "user_annotation": Evidence._annotation,
    "gpu_user_annotation": Evidence._annotation,
    "python_function": Evidence._python,
}
_PH_NAMES = {
    "M": "metadata events",
    "s": "flow events",
    "f": "flow events",
    "t": "flow events",
    "i": "instant events",
    "I": "instant events",
    "C": "counter events",
}


def _args(ev: KinetoEvent) -> dict[str, Any]:
    raw = bytes(ev.args)
    if not raw:
        return {}
    try:
        args = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:  # depth > 1024, or numbers out of range
        raise TraceFormatError(f"Kineto event {ev.name[:80]!r}: args unreadable ({exc})") from exc
    if not isinstance(args, dict):
        raise TraceFormatError(
            f"Kineto event {ev.name[:80]!r}: args must be an object, got {type(args).__name__}"
        )
    return args


_US = re.compile(rb"^(\d{1,17})(?:\.(\d{1,9}))?$")


def _time(value: msgspec.Raw, what: str, ev: KinetoEvent) -> int:
    """A time in µs as written (``"5130559174400.123"``) → integer ns, exactly (a float64 loses
    the ns of absolute-µs traces)."""
    raw = bytes(value)
    m = _US.match(raw)
    if m is not None:
        frac = (m.group(2) or b"")[:3].ljust(3, b"0")
        return int(m.group(1)) * 1000 + int(frac)
    try:
        number: Any = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        number = None
    numeric = isinstance(number, int | float) and not isinstance(number, bool)
    if not numeric or not math.isfinite(number) or not 0 <= number <= 1e16:
        raise TraceFormatError(
            f"Kineto event {ev.name[:80]!r}: {what} must be a finite time >= 0 in µs, got {raw[:40]!r}"
        )
    return int(number * 1000 + 0.5)


def _duration(ev: KinetoEvent) -> int:
    return 0 if not bytes(ev.dur) or bytes(ev.dur) == b"null" else _time(ev.dur, "dur", ev)


def _end(ev: KinetoEvent) -> int:
    return _time(ev.ts, "ts", ev) + _duration(ev)
