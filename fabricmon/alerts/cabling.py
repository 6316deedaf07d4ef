"""The ``rail_plan_violation`` alert: the LLDP cabling check's violations as alerts.

One alert per violation, scoped by the NIC (``node002:mlx5_1``) or, for a neighbour that is no
declared NIC, by the port it was seen on — so a re-cabling opens exactly the alerts of what
changed, a fixed cable resolves its alert at the next check, and a cable that stays wrong stays
one firing alert (no repeat per check). Neighbours merely *not seen* (a host off, no LLDP agent)
are never alerts; ``check_rail_plan --lldp`` lists them.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime

import redis

from fabricmon.alerts import services
from fabricmon.alerts.models import AlertTransition
from fabricmon.base import keys
from fabricmon.base.connections import connect
from fabricmon.core.detection.conditions import Condition
from fabricmon.core.topology.cabling import CablingFinding, CablingReport
from fabricmon.topology.cabling import CablingCheck, check_cabling
from fabricmon.topology.fabric_view import fabric_view
from fabricmon.topology.models import Fabric

log = logging.getLogger(__name__)
KIND = "rail_plan_violation"


def conditions(report: CablingReport) -> list[Condition]:
    """One condition per violation (wrong-rail NIC or unexpected neighbour)."""
    return [Condition(KIND, f.key, f"cabling: {f}", details=_details(f)) for f in report.violations]


def _details(f: CablingFinding) -> dict[str, object]:
    return {
        "finding": f.kind,
        "switch": f.switch,
        "port": f.port,
        "seen": f.seen,
        "declared": f.declared,
        "host": f.host,
        "nic": f.nic,
        "rail": f.rail,
        "switch_rail": f.switch_rail,
    }


def record_cabling(check: CablingCheck, *, now: datetime | None = None) -> list[AlertTransition]:
    """Advance the fabric's rail_plan_violation alerts with one check's findings."""
    geo = fabric_view(check.fabric).geometry
    return services.record_check(check.fabric, KIND, conditions(check.report), geo, now=now)


def check_fabric(fabric: str, *, now: datetime | None = None, r: redis.Redis | None = None) -> CablingCheck:
    """Read the fabric's LLDP, record the alerts, log what could not be read; returns the check."""
    check = check_cabling(fabric)
    try:
        _log_changes(fabric, check.errors, r or connect())
    except redis.RedisError as exc:  # (the alerts are the database's: recorded all the same)
        log.warning("cabling check %s: unreadable switches not logged this pass: Redis unreachable (%s); "
                    "%d switch(es) unread", fabric, exc, len(check.errors))
    record_cabling(check, now=now)
    return check


def _log_changes(fabric: str, errors: dict[str, str], r: redis.Redis) -> None:
    """Log a switch whose LLDP cannot be read once when that starts or its reason changes, and once
    when it is readable again — not at every check (the previous errors live in Redis)."""
    key = keys.cabling_errors(fabric)
    raw = r.get(key)
    before: dict[str, str] = json.loads(raw) if raw else {}
    for sw, why in sorted(errors.items()):
        if before.get(sw) != why:
            log.warning("cabling check %s: switch %s: LLDP not read: %s", fabric, sw, why)
    for sw in sorted(set(before) - set(errors)):
        log.info("cabling check %s: switch %s: LLDP read again", fabric, sw)
    r.set(key, json.dumps(errors))


def check_all() -> int:
    """Check every fabric; returns the violations found."""
    return sum(
        len(check_fabric(name).report.violations) for name in Fabric.objects.values_list("name", flat=True)
    )
