"""The What-if page's figures: each one a claim with its assumptions and gates, withheld when a gate
fails (the phase views' rule: nothing is drawn as if it were true)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fabricmon.core.phases.gates import Gate, failing, view_verdict

SENSITIVITY = "sensitivity, not a deployment prediction"


@dataclass(frozen=True)
class Figure:
    """One part of the What-if page: the numbers, what they assume, and the gates that vouch."""

    name: str
    title: str
    assumptions: tuple[str, ...]
    gates: tuple[Gate, ...]
    values: dict[str, Any]
    always: dict[str, Any] = field(default_factory=dict)  # shown even when withheld (inputs, sensitivity)
    note: str = SENSITIVITY

    @property
    def verdict(self) -> str:
        return view_verdict(self.gates)

    def as_dict(self) -> dict[str, Any]:
        withheld = self.verdict == "withhold"
        return {
            "name": self.name,
            "title": self.title,
            "verdict": self.verdict,
            "note": self.note,
            "assumptions": list(self.assumptions),
            "gates": [g.as_dict() for g in self.gates],
            "withheld_because": [g.reason for g in failing(self.gates) if g.verdict == "withhold"],
            "values": None if withheld else clean(self.values),
            "always": clean(self.always),
        }


def clean(x: Any) -> Any:
    """JSON-safe: non-finite floats become None, numpy scalars Python numbers, tuples lists."""
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, str | bytes):
        x = x.item()
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    return x
