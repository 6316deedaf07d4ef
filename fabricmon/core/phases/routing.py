"""How traffic is assumed to cross the fabric (``Routing.mode``) and the ECMP hash model.

* ``pxn``  NCCL PXN: a server's senders are folded onto the local GPU whose NIC sits on the
           destination's leaf (else its rail, else same local index), so traffic stays on-rail;
* ``ecmp`` every NIC pair is one flow hashed onto one uplink and one spine downlink;
* ``spray`` packet spraying: a cross-leaf flow's bytes split evenly over every usable uplink, and at
           each spine evenly over its downlinks to the destination leaf.

The ECMP hash model is splitmix64 of ``(src_gpu << 32 | dst_gpu) ^ seed`` (then splitmix64 again
for the spine downlink), choosing among the candidate cables in cabling order — the twin's model,
so "the same routing" is checkable (tests compare with twin/routing.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

RoutingMode = Literal["pxn", "ecmp", "spray"]
ROUTING_MODES: tuple[str, ...] = ("pxn", "ecmp", "spray")


_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """The ECMP hash model: splitmix64 finaliser, vectorized (uint64 arithmetic wraps on purpose)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (z ^ (z >> np.uint64(31))) & _MASK64


@dataclass(frozen=True)
class Routing:
    """How traffic is assumed to cross the fabric: the mode and, for ECMP, the hash seed."""

    mode: RoutingMode = "pxn"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ROUTING_MODES:
            raise ValueError(f"routing mode must be one of {', '.join(ROUTING_MODES)}, got {self.mode!r}")

    def label(self) -> str:
        return f"{self.mode}(seed={self.seed})" if self.mode == "ecmp" else self.mode
