"""A run's rank map: store it, place it on the run's fabric, build it from host names, say what is
missing.

::

    entries (API, page upload, the probe at start) ──shape checks──▶ placed on the run's fabric
        (core.topology.rank_map: switch port, else host + NIC, else host + local rank)
        ──▶ RankMapEntry rows with the NIC's leaf and port filled in

An entry the fabric cannot place is refused with a reason naming the host, NIC or port it does
not know (and what it has instead); valid entries beside it are stored. A run without a fabric —
or with one the topology does not hold — stores what it is sent unchecked, and ``runs.set_fabric``
places the stored map when the fabric is set. ``check`` is what the API, the run page and the
probe show: how many ranks are placed, which are missing, which entries are not placed and why.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction

from fabricmon.core.topology.rank_map import FabricHosts, RankMapError, missing_ranks, ranges_text
from fabricmon.jobs.models import RankMapEntry, Run
from fabricmon.jobs.validation import InputError, LineError, UnprocessableError, brief
from fabricmon.topology.fabric_view import FabricView, find_view

_RANK_STR_FIELDS = {"gpu": 64, "nic": 64, "switch": 100, "switch_port": 100}  # their column lengths
MAX_LISTED = 50  # unplaced entries listed in a check (the count is always whole)
MAX_MISSING_LISTED = 1_000  # missing ranks listed as numbers (the ranges text covers them all)

_HOSTS: weakref.WeakKeyDictionary[FabricView, FabricHosts] = weakref.WeakKeyDictionary()


def fabric_hosts(run: Run) -> FabricHosts | None:
    """The run's fabric as hosts, NICs and ports (None: no fabric, or one not in the topology);
    built once per cached fabric view."""
    view = find_view(run.fabric) if run.fabric else None
    if view is None:
        return None
    hosts = _HOSTS.get(view)
    if hosts is None:
        hosts = _HOSTS[view] = FabricHosts(view.spec)
    return hosts


def _shape_error(entry: Any, max_rank: int) -> tuple[str, str] | None:
    """(field, reason) when an entry is malformed, before the fabric is asked."""
    if not isinstance(entry, dict):
        return "", "entry must be an object"
    rank, host, local_rank = entry.get("rank"), entry.get("host"), entry.get("local_rank")
    if type(rank) is not int or not 0 <= rank < max_rank:
        return "rank", (f"required, an integer from 0 to {max_rank - 1} (the run's world_size, or "
                        f"FABRICMON_MAX_RANKS), got {brief(rank)}")
    if not isinstance(host, str) or not host or len(host) > 200:
        return "host", "required, a non-empty string of at most 200 characters"
    if local_rank is not None and (type(local_rank) is not int or not 0 <= local_rank < max_rank):
        return "local_rank", f"must be an integer from 0 to {max_rank - 1}"
    for f, most in _RANK_STR_FIELDS.items():
        if not isinstance(entry.get(f, ""), str | None) or len(entry.get(f) or "") > most:
            return f, f"must be a string of at most {most} characters"
    return None


def store_rank_map(run: Run, entries: Iterable[Any], source: str = "upload") -> tuple[int, list[LineError]]:
    """Upsert rank → host/GPU/NIC/port rows, each placed on the run's fabric when it has one;
    returns (stored, per-entry errors naming what the fabric does not know)."""
    good: dict[int, RankMapEntry] = {}
    errors: list[LineError] = []
    max_rank = int(run.world_size or settings.FABRICMON_MAX_RANKS)
    hosts = fabric_hosts(run)
    for n, entry in enumerate(entries, start=1):
        bad = _shape_error(entry, max_rank)
        if bad:
            errors.append(LineError(n, *bad))
            continue
        row = {"host": entry["host"], "local_rank": entry.get("local_rank"),
               **{f: str(entry.get(f, "") or "") for f in _RANK_STR_FIELDS}}
        if hosts is not None:
            try:
                row = hosts.place(entry).entry()
            except RankMapError as exc:
                errors.append(LineError(n, exc.field, f"rank {entry['rank']}: {exc.reason}"))
                continue
            row.pop("rank")
        good[entry["rank"]] = RankMapEntry(run=run, rank=entry["rank"], source=source, **row)
    with transaction.atomic():
        RankMapEntry.objects.bulk_create(
            good.values(),
            update_conflicts=True,
            unique_fields=["run", "rank"],
            update_fields=["host", "local_rank", "source", *_RANK_STR_FIELDS],
        )
    return len(good), errors


def build_rank_map(
    run: Run, hosts: Any, gpus_per_host: Any = None, first_rank: Any = 0
) -> tuple[list[dict[str, Any]], list[LineError]]:
    """Entries for a job on ``hosts`` (rank order: torchrun's node ranks, Slurm's block layout),
    placed on the run's fabric (``InputError`` for a malformed request or a run without a known
    fabric; per-host errors as ``LineError`` with the host's position as its line)."""
    if isinstance(hosts, str):  # "node001,node002" or one per line, as a scheduler prints them
        hosts = [h for h in hosts.replace(",", " ").split() if h]
    names_ok = isinstance(hosts, list) and all(isinstance(h, str) and 0 < len(h) <= 200 for h in hosts)
    if not hosts or not names_ok:
        raise InputError("hosts", f"required, a non-empty list of host names, got {brief(hosts)}")
    if len(hosts) > settings.FABRICMON_MAX_RANKS:
        raise InputError("hosts", f"at most {settings.FABRICMON_MAX_RANKS} hosts")
    for name, value, low in (("gpus_per_host", gpus_per_host, 1), ("first_rank", first_rank, 0)):
        if value is not None and (type(value) is not int or not low <= value <= settings.FABRICMON_MAX_RANKS):
            raise InputError(name, f"must be an integer from {low} to {settings.FABRICMON_MAX_RANKS}, "
                                   f"got {brief(value)}")
    fabric = fabric_hosts(run)
    if fabric is None:
        raise UnprocessableError("fabric", _no_fabric(run))
    placed, problems = fabric.build(hosts, gpus_per_host, first_rank or 0)
    errors = [LineError(i + 1, p.field, p.reason) for i, p in problems]
    return [p.entry() for p in placed], errors


def _no_fabric(run: Run) -> str:
    if not run.fabric:
        return "the run names no fabric: set it first (POST …/fabric, or the run page)"
    return (f"the run's fabric {run.fabric!r} is not in the topology: correct it (POST …/fabric, or the "
            "run page) or load it (manage.py load_topology)")


def place_stored(run: Run) -> None:
    """Place the run's stored entries on its (new) fabric: those it can place get its switch ports;
    the others stay as they were sent (``check`` names them)."""
    hosts = fabric_hosts(run)
    if hosts is None:
        return
    changed = []
    for row in RankMapEntry.objects.filter(run=run):
        try:
            got = hosts.place(_as_entry(row)).entry()
        except RankMapError:
            continue
        got.pop("rank")
        if any(getattr(row, k) != v for k, v in got.items()):
            for k, v in got.items():
                setattr(row, k, v)
            changed.append(row)
    RankMapEntry.objects.bulk_update(changed, ["host", "local_rank", *_RANK_STR_FIELDS], batch_size=500)


def _as_entry(row: RankMapEntry) -> dict[str, Any]:
    return {"rank": row.rank, "host": row.host, "local_rank": row.local_rank, "nic": row.nic,
            "switch": row.switch, "switch_port": row.switch_port}


def check(run: Run, rows: Sequence[RankMapEntry] | None = None) -> dict[str, Any]:
    """What the run's rank map covers on its fabric: placed ranks, missing ranks (named, as ranges),
    entries not placed and why, and one line saying it."""
    rows = list(RankMapEntry.objects.filter(run=run)) if rows is None else list(rows)
    world = int(run.world_size or (max((r.rank for r in rows), default=-1) + 1))
    missing = missing_ranks((r.rank for r in rows), world)
    out: dict[str, Any] = {
        "fabric": run.fabric, "world_size": world, "entries": len(rows), "checked": False,
        "missing_ranks": missing[:MAX_MISSING_LISTED], "missing": ranges_text(missing),
    }
    hosts = fabric_hosts(run)
    if hosts is None:
        out |= {"placed": 0, "coverage": 0.0, "unplaced": [], "unplaced_count": 0,
                "summary": f"{len(rows)} of {world} ranks in the map, not placed: {_no_fabric(run)}"}
        return out
    unplaced: list[dict[str, Any]] = []
    for row in rows:
        try:
            hosts.place(_as_entry(row))
        except RankMapError as exc:
            unplaced.append({"rank": row.rank, "field": exc.field, "reason": exc.reason})
    placed = len(rows) - len(unplaced)
    parts = [f"{placed} of {world} ranks placed on fabric {run.fabric!r}"]
    if missing:
        parts.append(f"missing from the map: rank{'s' if len(missing) > 1 else ''} {out['missing']}")
    if unplaced:
        first = unplaced[0]
        more = f" (and {len(unplaced) - 1} more)" if len(unplaced) > 1 else ""
        parts.append(f"not placed: rank {first['rank']}: {first['reason']}{more}")
    out |= {"checked": True, "placed": placed, "coverage": placed / world if world else 0.0,
            "unplaced": unplaced[:MAX_LISTED], "unplaced_count": len(unplaced), "summary": "; ".join(parts)}
    return out
