"""The What-if's editable parameters from a query string (page form, API, command line), each
refused with a message naming the field (a 400, never a 500)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from fabricmon.core.phases.routing import ROUTING_MODES, Routing
from fabricmon.core.whatif.report import Params
from fabricmon.core.whatif.terrace import Calibration

FIELDS = ("top_k", "alpha", "region_servers", "reconfig_ms", "routing", "fast_slow_ratio", "hidden",
          "bytes_per_elem", "x_half_kib", "sync_ms", "chain_us_per_row")


class ParamError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _num(q: Mapping[str, str], name: str, lo: float, hi: float, *, integer: bool = False) -> float | None:
    raw = (q.get(name) or "").strip()
    if not raw:
        return None
    try:
        v = float(raw)
    except ValueError:
        raise ParamError(name, f"must be a number, got {raw!r}") from None
    if not lo <= v <= hi or (integer and v != int(v)):
        kind = "an integer" if integer else "a number"
        raise ParamError(name, f"must be {kind} in [{lo:g}, {hi:g}], got {raw}")
    return v


def params_from(q: Mapping[str, str]) -> Params:
    """Parameters from a query mapping; unknown keys are ignored, bad values raise ParamError."""
    p = Params()
    top_k = _num(q, "top_k", 1, 1024)
    alpha = _num(q, "alpha", 1, 7, integer=True)
    region = _num(q, "region_servers", 1, 100_000, integer=True)
    reconfig = _num(q, "reconfig_ms", 0, 100_000)
    ratio = _num(q, "fast_slow_ratio", 0.01, 1000)
    hidden = _num(q, "hidden", 1, 1 << 20, integer=True)
    bpe = _num(q, "bytes_per_elem", 1, 8, integer=True)
    mode = (q.get("routing") or "pxn").strip()
    if mode not in ROUTING_MODES:
        raise ParamError("routing", f"must be one of {', '.join(ROUTING_MODES)}, got {mode!r}")
    cal = p.calibration
    x_half = _num(q, "x_half_kib", 0, 1 << 20)
    sync = _num(q, "sync_ms", 0, 1000)
    chain = _num(q, "chain_us_per_row", 0, 1000)
    if x_half is not None:
        cal = replace(cal, x_half_bytes=x_half * 1024)
    if sync is not None:
        cal = replace(cal, sync_ms=sync)
    if chain is not None:
        cal = replace(cal, chains_us_per_row={**cal.chains_us_per_row, "measured": chain})
    if bpe is not None and hidden is None:
        raise ParamError("hidden", "give hidden with bytes_per_elem (the row size is their product)")
    return Params(
        top_k=top_k if top_k is not None else p.top_k,
        alpha=int(alpha) if alpha is not None else p.alpha,
        region_servers=int(region) if region is not None else None,
        reconfig_ms=reconfig if reconfig is not None else p.reconfig_ms,
        routing=Routing(mode),  # type: ignore[arg-type]
        calibration=cal if isinstance(cal, Calibration) else p.calibration,
        assumed_ratio=ratio,
        row_bytes=int(hidden * (bpe or 2)) if hidden is not None else None,
    )
