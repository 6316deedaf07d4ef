"""Autograd's backward all-to-alls, matched to the forward layer and phase they undo.

Megatron's ``_AllToAll`` (and DeepSpeed's, Tutel's) run backward as the same all-to-all with the
splits swapped, inside ``autograd::engine::evaluate_function: …Backward`` and with no label of its
own: the trace names the forward (``decoder.layers.3.mlp.token_dispatch``) but not the backward.
A backward call sends what its forward received and receives what it sent, and autograd runs
them in reverse, so each unlabelled all-to-all inside a backward span takes the latest forward
call of the same step and process group whose per-peer bytes it mirrors (last in, first out;
matched forwards are used once) → ``dispatch_bwd`` / ``combine_bwd`` of that layer, as the probe
labels them. Without per-peer bytes on both sides there is nothing to compare: left ``other``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from collectors.traces.kineto.calls import Call
from collectors.traces.kineto.describe import Described
from collectors.traces.kineto.labels import Spans
from collectors.traces.kineto.vocab import is_all_to_all

FORWARD_PHASES = frozenset({"dispatch", "combine"})
MATCHED = "backward all-to-alls matched to their forward layer/phase (per-peer bytes mirrored)"
UNMATCHED = "backward all-to-alls not matched: no forward call of their step mirrors their bytes"
NO_PEERS = "backward all-to-alls not matched: per-peer bytes unknown"


def match_backward(described: list[tuple[Call, Described]], backward: Spans, notes: Counter[str]) -> None:
    """Label the unlabelled backward all-to-alls in ``described`` (in place); count in ``notes``."""
    stacks: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    order = sorted(
        (pair for pair in described if pair[1].event is not None and is_all_to_all(pair[1].collective)),
        key=lambda pair: pair[1].event["start_ns"],  # type: ignore[index]
    )
    for call, d in order:
        ev = d.event
        assert ev is not None
        key = (ev["pg"], ev["step"])
        if ev["phase"] in FORWARD_PHASES:
            if "send_bytes_per_peer" in ev and "recv_bytes_per_peer" in ev:
                stacks[key].append(ev)
            continue
        if ev["phase"] != "other" or not _in_backward(call, backward):
            continue
        if "send_bytes_per_peer" not in ev or "recv_bytes_per_peer" not in ev:
            notes[NO_PEERS] += 1
            continue
        stack = stacks[key]
        for i in range(len(stack) - 1, -1, -1):
            fwd = stack[i]
            if (
                fwd["recv_bytes_per_peer"] == ev["send_bytes_per_peer"]
                and fwd["send_bytes_per_peer"] == ev["recv_bytes_per_peer"]
            ):
                del stack[i]
                ev["layer"], ev["phase"] = fwd["layer"], fwd["phase"] + "_bwd"
                notes[MATCHED] += 1
                break
        else:
            notes[UNMATCHED] += 1


def _in_backward(call: Call, backward: Spans) -> bool:
    root = call.root
    return root is not None and backward.at(root.pid, root.tid, root.ts) is not None
