"""What an attribution says: per-(layer, phase) bytes per port with standard errors, how well they
fit the counters, and the hot port of each phase — claimed only where the counters vouch for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]



@dataclass(frozen=True)
class Attribution:
    """Per-(layer, phase) bytes per port, estimated from coarse counters, and how well they fit."""

    keys: tuple[tuple[int, str], ...]
    bytes_per_phase: FloatArray  # (K, C): bytes one instance of key k puts on column c
    background_bytes_per_s: FloatArray  # (C,) rate not explained by phases
    residual_rel: float  # ‖O·x + dt·b − m‖ / ‖m‖ over everything
    residual_rel_per_column: FloatArray  # (C,)
    intervals: int
    rank: int  # numerical rank of the occupancy matrix (< K: phases not separable)
    condition: float

    se_bytes: FloatArray | None = None  # (K, C) standard error of bytes_per_phase (see ``attribute``)
    residual_std: FloatArray | None = None  # (C,) per-interval residual std of each column
    prior_used: bool = False  # the projection's per-phase pattern was used as a prior

    def load(self, ports: int | None = None) -> FloatArray:
        """(K, P) attributed bytes per instance; with ``ports``, columns are [in | out] of P ports
        and a port's load is its busier direction."""
        x = self.bytes_per_phase
        return np.maximum(x[:, :ports], x[:, ports:]) if ports else x

    def hot_ports(self, ports: int | None = None, z: float = 2.0) -> HotPorts:
        """The hot port of each (layer, phase), claimed only where it beats the runner-up by more
        than ``z`` standard errors of the difference; otherwise the ports it cannot be told from."""
        x = self.bytes_per_phase
        k_n = x.shape[0]
        se = self.se_bytes if self.se_bytes is not None else np.full(x.shape, np.inf)
        if ports:
            busier_out = x[:, ports:] > x[:, :ports]
            load = np.where(busier_out, x[:, ports:], x[:, :ports])
            se_p = np.where(busier_out, se[:, ports:], se[:, :ports])
        else:
            load, se_p = x, se
        rows = np.arange(k_n)
        order = np.argsort(-load, axis=1, kind="stable")
        top0 = order[:, 0] if load.shape[1] else np.zeros(k_n, dtype=np.int64)
        direction = (_direction(x[rows, top0], x[rows, ports + top0]) if ports
                     else np.zeros(k_n, dtype=np.int8))
        top, second = order[:, 0], order[:, 1] if load.shape[1] > 1 else order[:, 0]
        top_b = load[rows, top]
        # SE of (top − other) ≤ se_top + se_other whatever the two estimates' correlation: the
        # claim is conservative.
        se_diff = se_p[rows, top][:, None] + se_p
        with np.errstate(invalid="ignore"):
            tied = load >= top_b[:, None] - z * se_diff
        tied[rows, top] = True
        scale = np.where(top_b > 0, top_b, 1.0)
        lead = (top_b - load[rows, second]) / scale
        lead_se = se_diff[rows, second] / scale
        claimed = (lead > z * lead_se) & (top_b > 0)
        return HotPorts(self.keys, top, second, lead, lead_se, claimed, tied, z, direction)


TIE_REL = 1e-3  # in and out within 0.1 % of each other: a tie, said as such (never "in" by index)
CLOSE_LEAD_REL = 0.10  # a hot port that leads the runner-up by less than this is not decisive


def _direction(b_in: FloatArray, b_out: FloatArray) -> npt.NDArray[np.int8]:
    """+1 the switch port sends more (egress: where an incast queues), −1 it receives more, 0 a tie."""
    with np.errstate(invalid="ignore"):
        tie = np.abs(b_out - b_in) <= TIE_REL * np.maximum(np.abs(b_in), np.abs(b_out))
        d = np.where(b_out > b_in, 1, -1)
    return np.where(tie | ~np.isfinite(b_in + b_out), 0, d).astype(np.int8)


def margin_hot_ports(
    keys: tuple[tuple[Any, ...], ...], load_in: FloatArray, load_out: FloatArray,
    close: float = CLOSE_LEAD_REL,
) -> HotPorts:
    """The hot port of each column of an exact view (projected, measured), with its margin.

    No standard error here: the projection is the job's own bytes, a counter is what it counted.
    What can still mislead is a lead too small to matter — two ports 3.5 % apart are both hot —
    so a port is claimed only when it leads the runner-up by ``close`` or more, and every port
    within ``close`` of the top is listed as tied. A port's load is its busier direction; the
    direction of the top port is kept (ties said as ties)."""
    a_in = np.asarray(load_in, dtype=np.float64)
    a_out = np.asarray(load_out, dtype=np.float64)
    load = np.fmax(a_in, a_out)  # NaN only where both are
    k_n, n = load.shape
    filled = np.where(np.isfinite(load), load, -np.inf)
    rows = np.arange(k_n)
    if n == 0:
        z = np.zeros(k_n, dtype=np.int64)
        return HotPorts(keys, z, z, np.full(k_n, np.nan), np.full(k_n, np.nan), np.zeros(k_n, bool),
                        np.zeros((k_n, 0), bool), 0.0, np.zeros(k_n, np.int8))
    top = np.argmax(filled, axis=1)
    top_b = filled[rows, top]
    rest = filled.copy()
    rest[rows, top] = -np.inf
    second = np.argmax(rest, axis=1) if n > 1 else top
    second_b = rest[rows, second] if n > 1 else np.full(k_n, -np.inf)
    has = np.isfinite(top_b) & (top_b > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        runner = np.where(np.isfinite(second_b), second_b, 0.0)
        lead = np.where(has, (top_b - runner) / np.where(has, top_b, 1.0), np.nan)
        tied = filled >= (top_b * (1 - close))[:, None]
    tied &= has[:, None]
    claimed = has & (lead >= close)
    direction = _direction(a_in[rows, top], a_out[rows, top])
    return HotPorts(keys, top, second, lead, np.full(k_n, np.nan), claimed, tied, 0.0, direction)


@dataclass(frozen=True)
class HotPorts:
    """Per (layer, phase): the attributed hot port and whether the counters can vouch for it.

    ``claimed[k]``: the top port beats the runner-up by more than z standard errors (attributed
    view) or by ``CLOSE_LEAD_REL`` (exact views, ``z == 0``) — draw the hot-port marker.
    Otherwise the cell is *ambiguous*: the top two are within ``lead ± lead_se`` and ``tied[k]``
    marks every port that cannot be told from the top.
    """

    keys: tuple[tuple[Any, ...], ...]  # (layer, phase) attributed; (step, layer, phase) exact views
    port: IntArray  # (K,) attributed hottest port (column)
    runner_up: IntArray  # (K,)
    lead_rel: FloatArray  # (K,) (top − runner-up) / top
    lead_se_rel: FloatArray  # (K,) standard error of lead_rel (inf: not separable at all)
    claimed: npt.NDArray[np.bool_]  # (K,)
    tied: npt.NDArray[np.bool_]  # (K, P) ports not separable from the top (the top included)
    z: float  # 0: claimed by margin (``margin_hot_ports``), not by standard errors
    direction: npt.NDArray[np.int8] | None = None  # (K,) top port: +1 egress (out), −1 in, 0 tie

    def dir_label(self, k: int) -> str:
        d = 0 if self.direction is None else int(self.direction[k])
        return {1: "out", -1: "in", 0: "in = out"}[d]

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: per key the port (None when not claimed), lead, its SE and the tied ports."""
        def num(v: float) -> float | None:
            return float(v) if np.isfinite(v) else None

        return {
            "z": self.z,
            "port": [int(p) if c else None for p, c in zip(self.port, self.claimed, strict=True)],
            "top": self.port.tolist(),
            "runner_up": self.runner_up.tolist(),
            "lead_rel": [num(v) for v in self.lead_rel],
            "lead_se_rel": [num(v) for v in self.lead_se_rel],
            "claimed": self.claimed.tolist(),
            "tied": [np.flatnonzero(t).tolist() for t in self.tied],
            "dir": [self.dir_label(k) for k in range(len(self.port))],
        }
