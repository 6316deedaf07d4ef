"""From one window's findings to rule conditions (the alert lifecycle's input) and the named
trajectory step of a hot set: ports → hosts → GPUs (→ ranks when a run is known).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from fabricmon.core.detection.down import FABRIC_KEY, uncovered
from fabricmon.core.detection.geometry import FabricGeometry
from fabricmon.core.detection.window import WindowFindings


@dataclass(frozen=True)
class TrajectoryStep:
    """Where the hot set was in one window: ports → hosts → GPUs (→ ranks when a run is known)."""

    ts_ns: int
    ports: tuple[str, ...]  # "switch:port"
    hosts: tuple[str, ...]
    gpus: tuple[int, ...]
    ranks: tuple[int, ...] = ()
    leaf_jump: bool = False
    rail_jump: bool = False


def trajectory_step(
    findings: WindowFindings, geo: FabricGeometry, rank_of_port: Mapping[int, int] | None = None
) -> TrajectoryStep:
    """Names for the hot set of one window (small: hot set only); for a migration, the hot set it
    moved to when first seen (a move confirmed a window later happened then, not now)."""
    if findings.migrated and len(findings.moved_ports):
        return _step(findings.moved_ports, findings.moved_ts_ns, geo, rank_of_port,
                     jumps=(findings.leaf_jump, findings.rail_jump))
    return _step(findings.hot_ports, findings.ts_ns, geo, rank_of_port,
                 jumps=(findings.leaf_jump, findings.rail_jump))


def origin_step(
    findings: WindowFindings, geo: FabricGeometry, rank_of_port: Mapping[int, int] | None = None
) -> TrajectoryStep | None:
    """Where a migration came from (the previous hot set, at its own window), or None when this
    window did not migrate: an episode that opens on a hop starts there, not at the hop's end."""
    if not findings.migrated or not len(findings.from_ports):
        return None
    return _step(findings.from_ports, findings.from_ts_ns, geo, rank_of_port)


def _step(
    ports_idx: npt.NDArray[np.int64], ts_ns: int, geo: FabricGeometry, rank_of_port: Mapping[int, int] | None,
    *, jumps: tuple[bool, bool] = (False, False),
) -> TrajectoryStep:
    idx = geo.index
    ports = tuple(f"{idx.switch_names[idx.switch_of[p]]}:{idx.port_names[p]}" for p in ports_idx)
    hosts = tuple(geo.host_names[h] if 0 <= h < len(geo.host_names) else "" for h in geo.host_of[ports_idx])
    ranks = tuple(rank_of_port[int(p)] for p in ports_idx if int(p) in rank_of_port) if rank_of_port else ()
    return TrajectoryStep(
        ts_ns=ts_ns,
        ports=ports,
        hosts=hosts,
        gpus=tuple(int(g) for g in geo.gpu_of[ports_idx]),
        ranks=ranks,
        leaf_jump=jumps[0],
        rail_jump=jumps[1],
    )


@dataclass(frozen=True)
class Condition:
    """One rule's verdict for one scope in one window — the input of the alert lifecycle.

    ``key`` identifies the scope (the fingerprint is built from fabric + kind + key), so a moving
    incast is one key per fabric (it stays one alert while it moves), a static incast one per port.
    """

    kind: str  # incast | moving_incast | pfc_storm | ecmp_imbalance | rail_violation | target_down
    # | rail_plan_violation (from the LLDP cabling check, fabricmon/alerts/cabling.py)
    key: str
    summary: str
    value: float = 0.0
    ports: tuple[int, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)


def conditions(findings: WindowFindings, geo: FabricGeometry) -> list[Condition]:
    """Turn findings into rule conditions. Per-port incast is inhibited while the hot set moves,
    so operators get one moving-incast alert rather than one alert per port it visits."""
    hot = [_moving_incast(findings, geo)] if findings.moving else _incasts(findings, geo)
    return hot + _switch_conditions(findings, geo)


def _port_name(geo: FabricGeometry, p: int) -> str:
    idx = geo.index
    return f"{idx.switch_names[idx.switch_of[p]]}:{idx.port_names[p]}"


def _moving_incast(findings: WindowFindings, geo: FabricGeometry) -> Condition:
    """One condition per fabric while the hot set moves: it stays one alert wherever it goes."""
    return Condition(
        "moving_incast",
        "fabric",
        f"moving incast: hot set {', '.join(_port_name(geo, int(p)) for p in findings.hot_ports[:4])}"
        f" (J={findings.jaccard:.2f}, {findings.migrations} migrations"
        f"{', leaf jump' if findings.leaf_jump else ''}"
        f"{', rail jump' if findings.rail_jump else ''}){_confidence_note(findings)}",
        value=findings.migration_rate,
        ports=tuple(int(p) for p in findings.hot_ports),
        details={
            "leaf_jump": findings.leaf_jump,
            "rail_jump": findings.rail_jump,
            "migrations": findings.migrations,
            "fan_in_known": findings.fan_in_known,
            **_basis(findings),
        },
    )


def _basis(findings: WindowFindings) -> dict[str, str]:
    """What the incast rule judged on: queue telemetry (high confidence) or load alone (low)."""
    if findings.pressure_known:
        return {"confidence": "high", "basis": "queue telemetry + load + fan-in"}
    return {"confidence": "low", "basis": "utilization + fan-in (no queue telemetry)"}


def _confidence_note(findings: WindowFindings) -> str:
    return "" if findings.pressure_known else " [low confidence: utilization only, no queue telemetry]"


def _incasts(findings: WindowFindings, geo: FabricGeometry) -> list[Condition]:
    """One condition per hot port of a hot set that stays put."""
    out = []
    for p, f, ld in zip(findings.hot_ports, findings.hot_fan_in, findings.hot_load, strict=True):
        fan = f"fan-in {f:.0f}" if np.isfinite(f) else "fan-in unknown"
        name = _port_name(geo, int(p))
        summary = f"incast on {name}: load {ld:.2f}, {fan}{_confidence_note(findings)}"
        out.append(Condition("incast", name, summary, value=float(ld), ports=(int(p),),
                             details=_basis(findings)))
    return out


def _switch_conditions(findings: WindowFindings, geo: FabricGeometry) -> list[Condition]:
    """Per switch: PFC storm, ECMP imbalance, rail-plan violation, no data."""
    idx = geo.index
    names = idx.switch_names
    out: list[Condition] = []
    storm_sw = idx.switch_of[findings.storm_ports]
    for s in np.unique(storm_sw):
        ports = findings.storm_ports[storm_sw == s]
        out.append(Condition("pfc_storm", names[s], f"PFC storm on {names[s]}: {len(ports)} port(s) paused",
                             value=float(len(ports)), ports=tuple(int(p) for p in ports)))
    for s, r in zip(findings.ecmp_switches, findings.ecmp_ratio, strict=True):
        out.append(Condition("ecmp_imbalance", names[s],
                             f"ECMP imbalance on {names[s]} uplinks: busiest {r:.1f}× mean", value=float(r)))
    for s in np.unique(idx.switch_of[findings.rail_violation_ports]):
        out.append(Condition("rail_violation", names[s],
                             f"rail-plan violation: traffic leaves rail via {names[s]} uplinks"))
    out.extend(_targets_down(findings, names))
    return out


def _targets_down(findings: WindowFindings, names: tuple[str, ...]) -> list[Condition]:
    """One alert per switch without data — except switches silenced together (most of the fabric,
    or most of one collector's shard): one alert for each such stall, which per-switch alerts would
    repeat once per switch."""
    out = [Condition("target_down", names[s], f"{names[s]}: no data")
           for s in uncovered(findings.down_switches, findings.down_rollups)]
    for r in findings.down_rollups:
        down = [names[s] for s in r.down]
        shown = ", ".join(down[:4]) + (f" and {len(down) - 4} more" if len(down) > 4 else "")
        if r.key == FABRIC_KEY:
            scope = f"{len(down)} of {r.total} switches"
            why = "the collection path stalled (collectors, their host or the management network)"
        else:
            scope = f"{len(down)} of the {r.total} switches of {r.key}"
            why = "the collector polling that shard stalled (its worker, its host or its path to them)"
        summary = f"{scope} without data at once ({shown}): {why}, not each switch"
        if r.tail:  # below the hold fraction: the stall's last members, until each is back
            summary = f"{scope} still without data since the stall ({shown}): {why}; its last switches"
        out.append(Condition("target_down", r.key, summary, value=float(len(down)),
                             details={"switches_down": len(down), "switches": r.total, "first": down[:16]}))
    return out
