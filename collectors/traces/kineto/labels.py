"""Steps, MoE layers and phases from the names a trace carries (job_events.md §2.5, §6).

- ``ProfilerStep#N`` spans (``torch.profiler`` with a schedule, or ``prof.step()``) give steps.
- Phase labels: our own ``moe/layer{L}/{phase}`` record_functions (the probe opens them), and
  NVTX-like names a framework or a user writes (``decoder.layers.3.moe/dispatch``,
  ``MoE L3 combine backward``); Megatron-LM's dispatcher methods seen with ``with_stack``
  (``token_dispatch``, ``token_combine``, ``MoELayer.dispatch/combine``).
- MoE modules (``nn.Module: MoELayer_3`` — Megatron ``MoELayer``, DeepSpeed ``MOELayer``, Tutel
  ``MOELayer``, ``…SparseMoeBlock``) give the layer; inside one, an unlabelled all-to-all is the
  dispatch unless it is the module's last one, the combine (DeepSpeed and Tutel run two; Megatron
  sends tokens and probs before the combine).
- Backward all-to-alls without a label are matched, last-in first-out, to the forward call of
  the same step whose per-peer bytes they mirror (a backward of a dispatch sends what the dispatch
  received) → ``dispatch_bwd`` / ``combine_bwd`` of that layer, as the probe does.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from collectors.traces.schema import PHASE_LABEL_RE, PHASES

_PHASE_WORD = re.compile(r"(?i)(?<![a-z])(dispatch|combine)(?![a-z])")
_BWD_WORD = re.compile(r"(?i)(?<![a-z])(bwd|backward|grad)(?![a-z])")
_LAYER = re.compile(r"(?i)(?:layers?|blocks?)[._/\- ]?(\d{1,6})(?!\d)|(?<![a-z0-9])l(\d{1,6})(?![a-z0-9])")
_MODULE = re.compile(r"^nn\.Module: (\w*?(?:MoE|MOE|Moe|moe)\w*?)_(\d{1,6})$")
_PY_FUNCTION = re.compile(r"\): (token_dispatch|token_combine|dispatch|combine)$")


def label_of(name: str) -> tuple[int | None, str] | None:
    """(layer, phase) a record_function / NVTX / python-function name assigns, if any."""
    if len(name) > 300:
        return None
    m = PHASE_LABEL_RE.match(name)
    if m is not None and m.group(2) in PHASES:
        return (int(m.group(1)) if m.group(1) is not None else None), m.group(2)
    m = _PY_FUNCTION.search(name)
    if m is not None:
        return None, m.group(1).removeprefix("token_")
    if "/" in name and ".py(" in name:  # other python functions: never phase labels
        return None
    m = _PHASE_WORD.search(name)
    if m is None:
        return None
    phase = m.group(1).lower() + ("_bwd" if _BWD_WORD.search(name) else "")
    layer = _LAYER.search(name)
    return (int(layer.group(1) or layer.group(2)) if layer else None), phase


def module_layer(name: str) -> int | None:
    """The MoE layer a python-function span ``nn.Module: <MoE class>_<k>`` is (k: instance order)."""
    m = _MODULE.match(name) if name.startswith("nn.Module: ") else None
    return int(m.group(2)) if m else None


class Spans:
    """Intervals per thread, for 'innermost span containing t' lookups (nested or disjoint)."""

    def __init__(self, items: Iterable[tuple[Any, Any, int, int, Any]]) -> None:
        by_key: dict[tuple[Any, Any], list[tuple[int, int, Any]]] = defaultdict(list)
        for pid, tid, start, end, value in items:
            by_key[(pid, tid)].append((start, end, value))
        self._lists: dict[tuple[Any, Any], tuple[list[int], list[int], list[tuple[int, int, Any]]]] = {}
        for key, spans in by_key.items():
            spans.sort(key=lambda s: (s[0], -s[1]))
            reach: list[int] = []
            top = -1
            for s in spans:
                top = max(top, s[1])
                reach.append(top)
            self._lists[key] = ([s[0] for s in spans], reach, spans)

    def at(self, pid: Any, tid: Any, t: int) -> tuple[int, int, Any] | None:
        """The latest-starting span on (pid, tid) that contains ``t``."""
        found = self._lists.get((pid, tid))
        if found is None:
            return None
        starts, reach, spans = found
        i = bisect.bisect_right(starts, t) - 1
        while i >= 0 and reach[i] >= t:
            if spans[i][1] >= t:
                return spans[i]
            i -= 1
        return None


class Steps:
    """``ProfilerStep#N`` spans: the step of an instant (contained; else, for GPU work that runs
    after its CPU step ended, the latest step begun before it)."""

    def __init__(self, steps: list[tuple[int, int, int, Any]]) -> None:
        self.steps = sorted(steps)
        self._starts = [s[0] for s in self.steps]

    def at(self, t: int, *, gpu: bool = False) -> int | None:
        i = bisect.bisect_right(self._starts, t) - 1
        if i < 0:
            return None
        _start, end, step, _pid = self.steps[i]
        return step if (t <= end or gpu) else None
