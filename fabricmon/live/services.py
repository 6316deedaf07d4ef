"""The live app's verbs for its pages: which fabrics exist, a fabric's heatmap layout, one port's
series and the switches' health. The WebSocket's stream is ``stream.py``."""

from __future__ import annotations

import math
import time
from typing import Any

import redis

from fabricmon.core.telemetry.frames import Frame
from fabricmon.live import wire
from fabricmon.telemetry import leases, live_window
from fabricmon.topology.fabric_view import find_view
from fabricmon.topology.models import Fabric, Switch

DEFAULT_WINDOW_S = 300.0
MAX_WINDOW_S = 3600.0


def window_seconds(raw: str | None) -> float:
    """A page's ``window_s`` (seconds, at most an hour); ``ValueError`` naming the problem for
    anything that is not a positive finite number."""
    if raw is None or raw == "":
        return DEFAULT_WINDOW_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"window_s must be a number of seconds (got {raw[:40]!r})") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"window_s must be a positive number of seconds (got {raw[:40]!r})")
    return min(value, MAX_WINDOW_S)


def window_frames(frames: list[tuple[bytes, Frame]], window_s: float) -> list[Frame]:
    """The frames of the last ``window_s`` seconds that share the newest frame's port layout."""
    if not frames:
        return []
    newest = frames[-1][1]
    since_ns = newest.ts_ns - int(window_s * 1e9)
    return [f for _, f in frames if f.ts_ns > since_ns and f.topology_version == newest.topology_version]


def port_series(r: redis.Redis, fabric: str, position: int, window_s: float) -> dict[str, Any]:
    """Every metric of one port over the window: ``{"ts_ms": [...], "metrics": {name: [...]}}``;
    ``None`` marks no data (JSON has no NaN). Only the window's frames are read, and of each only
    this port's values (``live_window.port_window``): the answer and its cost follow one port, not
    the fabric."""
    newest = live_window.latest(r, fabric)
    if newest is None:
        return {"ts_ms": [], "metrics": {}, "units": {}}
    since_ns = newest[1].ts_ns - int(window_s * 1e9)
    since_ms = int(newest[0].split(b"-")[0]) - int(window_s * 1000) - 5_000  # ids: append time (ms)
    samples = [(h, v) for h, v in live_window.port_window(r, fabric, position, since_ms)
               if int(h["ts_ns"]) > since_ns and h["topo"] == newest[1].topology_version and v]
    names = sorted({m for _, v in samples for m in v})
    out = {name: [None if math.isnan(x := v.get(name, math.nan)) else x for _, v in samples]
           for name in names}
    units = {m: wire.scale_of(m)["unit"] for m in names}
    return {"ts_ms": [int(h["ts_ns"]) / 1e6 for h, _ in samples], "metrics": out, "units": units}


# --- pages ---------------------------------------------------------------------------------------
def known_fabrics(r: redis.Redis) -> tuple[list[str], list[str]]:
    """(fabrics in the topology database, fabrics with live frames but no stored topology)."""
    stored = sorted(Fabric.objects.values_list("name", flat=True))
    return stored, sorted(set(live_window.fabrics(r)) - set(stored))


def layout_for(fabric: str) -> dict[str, Any] | None:
    """The heatmap layout of a stored fabric (cached per topology version), ``None`` if unknown."""
    view = find_view(fabric)
    return view.heatmap if view is not None else None


def switch_health(r: redis.Redis, fabric: str, switches: list[str]) -> list[dict[str, Any]]:
    """One row per switch (topology order, then any only the collectors know), ``state`` one of
    up / down / stale / never polled. Stale: no success for 3 poll intervals.

    Beside what the collector wrote (``live_window`` health: its process, shard and lease token,
    last poll, poll duration, error counts by kind, the last error), each row says how the switch
    is read (``protocol``, from the topology), whether that collector still holds its shard's lease
    (``lease``, asked of ``telemetry.leases``), the errors counted (``errors_total``, every failed
    poll since the counts began, beside ``failing_for``: the failures in a row now, 0 once a poll
    succeeds) and how old the last error is."""
    health = live_window.read_health(r, fabric)
    protocols = _protocols(fabric)
    shards = sorted({str(h["shard"]) for h in health.values() if h.get("shard")})
    held = {shard: _lease_of(r, shard) for shard in shards}
    now_ns = time.time_ns()
    rows = []
    for name in [*switches, *sorted(set(health) - set(switches))]:
        h = health.get(name)
        if h is None:
            rows.append({"switch": name, "state": "never polled", "protocol": protocols.get(name, "")})
            continue
        last_ns = h.get("last_success_ns") or 0
        interval_s = float(h.get("interval_s") or 1.0)
        age_s = (now_ns - last_ns) / 1e9 if last_ns else None
        stale = age_s is None or age_s > 3 * interval_s + 2
        state = "down" if not h.get("up") else ("stale" if stale else "up")
        error_ns = h.get("last_error_ns")
        rows.append({
            "switch": name, "state": state, "age_s": age_s, **h,
            "protocol": protocols.get(name, ""),
            "errors_total": int(sum((h.get("error_counts") or {}).values())),
            "failing_for": int(h.get("consecutive_failures", h.get("errors", 0)) or 0),
            "last_error_age_s": (now_ns - error_ns) / 1e9 if error_ns else None,
            "lease": _lease_state(h.get("collector"), held.get(str(h.get("shard", "")))),
        })
    return rows


def newest_frame_age_s(r: redis.Redis, fabric: str) -> float | None:
    """Seconds since the fabric's newest frame was appended to the live window (None: no frames)."""
    newest = live_window.newest_id(r, fabric)
    if newest is None:
        return None
    return max(0.0, time.time() - int(newest.split(b"-")[0]) / 1e3)


def _protocols(fabric: str) -> dict[str, str]:
    """How each switch of the topology is read: "SNMP v2c", "SNMP v3", "gNMI", "SNMP v2c + gNMI"."""
    out = {}
    for name, collector, version in Switch.objects.filter(fabric__name=fabric).values_list(
        "name", "collector", "snmp_version"
    ):
        snmp = f"SNMP v{version}"
        out[name] = {"snmp": snmp, "gnmi": "gNMI"}.get(collector, f"{snmp} + gNMI")
    return out


def _lease_of(r: redis.Redis, shard: str) -> dict[str, Any]:
    return {"holder": leases.holder(r, shard), "expires_in_s": leases.lease_expires_in_s(r, shard),
            "standby": leases.standby(r, shard) is not None}


def _lease_state(collector: dict[str, Any] | None, lease: dict[str, Any] | None) -> dict[str, Any] | None:
    """``held``: the collector that wrote this health still holds the shard; ``taken``: another one
    holds it now (a takeover: the new holder writes at its next poll); ``free``: nobody does."""
    if not collector or lease is None:
        return None
    holder = lease["holder"]
    state = "free" if holder is None else ("held" if holder == collector.get("lease") else "taken")
    return {"state": state, "expires_in_s": lease["expires_in_s"], "standby": lease["standby"],
            "ttl_s": collector.get("lease_ttl_s")}
