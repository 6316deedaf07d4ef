"""Runs and what their owners say about them: create, tag and end a run; set its fabric; note what
the job's probe dropped. (Rank maps: ``rank_maps.py``.)
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fabricmon.base import sockets
from fabricmon.jobs import rank_maps
from fabricmon.jobs.models import Run
from fabricmon.jobs.rank_maps import store_rank_map  # noqa: F401  (re-exported: where callers look)
from fabricmon.jobs.validation import InputError, UnprocessableError, brief
from fabricmon.topology.models import Fabric

MAX_TAGS, MAX_TAG_LEN = 64, 100


def clean_tags(tags: Any) -> list[str]:
    # a list only: list("abc") would store ["a", "b", "c"], list(5) and list(None) raise
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise InputError("tags", f"must be a list of strings, got {brief(tags)}")
    cleaned = sorted({t.strip() for t in tags if t.strip()})
    # the list as sent, not as deduplicated: 10,000 copies of one tag are not one tag
    if len(tags) > MAX_TAGS or any(len(t) > MAX_TAG_LEN for t in tags):
        raise InputError("tags", f"at most {MAX_TAGS} tags of at most {MAX_TAG_LEN} characters")
    return cleaned


def fabric_problem(name: Any) -> str | None:
    """Why ``name`` cannot be a run's fabric (None: it can; "" is no fabric yet, set later)."""
    if not isinstance(name, str) or len(name) > 100:
        return f"must be a string of at most 100 characters, got {brief(name)}"
    if not name or Fabric.objects.filter(name=name).exists():
        return None
    known = list(Fabric.objects.order_by("name").values_list("name", flat=True)[:21])
    has = ", ".join(known[:20]) + (", …" if len(known) > 20 else "") if known else (
        "none yet: load one with manage.py load_topology")
    return f"unknown fabric {name!r}: the topology's fabrics are {has}"


def create_run(
    owner: Any, name: str, tags: Any = (), fabric: str = "", world_size: int | None = None, *,
    check_fabric: bool = False,
) -> Run:
    """A new running run; every argument checked (``InputError`` naming the field). The API and the
    pages pass ``check_fabric``: a fabric the topology does not hold is refused, naming it."""
    if not isinstance(name, str) or not name or len(name) > 200:
        raise InputError("name", "required, a string of 1 to 200 characters")
    max_world = settings.FABRICMON_MAX_WORLD_SIZE
    if isinstance(world_size, float) and world_size.is_integer():  # JSON's 8.0 is the integer 8
        world_size = int(world_size)
    if world_size is not None and (type(world_size) is not int or not 0 < world_size <= max_world):
        raise InputError("world_size", f"must be an integer from 1 to {max_world}, got {brief(world_size)}")
    if not isinstance(fabric, str) or len(fabric) > 100:
        raise InputError("fabric", "must be a string of at most 100 characters")
    problem = fabric_problem(fabric) if check_fabric else None
    if problem:
        raise UnprocessableError("fabric", problem)
    return Run.objects.create(
        owner=owner, name=name.strip() or name, tags=clean_tags(list(tags) if type(tags) is tuple else tags),
        fabric=fabric, world_size=world_size,
    )


def set_tags(run: Run, tags: Any) -> Run:
    run.tags = clean_tags(tags)
    run.save(update_fields=["tags"])
    return run


def set_fabric(run: Run, fabric: Any) -> Run:
    """Set or correct the run's fabric (``InputError`` naming an unknown one), then check its stored
    rank map against it: entries given by host and local rank or NIC get the switch ports of the
    new fabric. The run's phase sockets are woken (their views now follow the new fabric)."""
    if fabric == "" or not isinstance(fabric, str) or len(fabric) > 100:
        raise InputError("fabric", "required: the name of a fabric of the topology (at most 100 characters)")
    problem = fabric_problem(fabric)
    if problem:
        raise UnprocessableError("fabric", problem)
    run.fabric = fabric
    run.save(update_fields=["fabric"])
    rank_maps.place_stored(run)
    sockets.run_changed(run.pk)
    return run


def end_run(run: Run, state: str = Run.State.FINISHED) -> Run:
    if state not in (Run.State.FINISHED, Run.State.FAILED, Run.State.CANCELLED):
        raise InputError("state", "must be one of finished, failed, cancelled")
    run.state, run.ended_at = state, timezone.now()
    run.save(update_fields=["state", "ended_at"])
    return run


# --- what the probe dropped --------------------------------------------------------------------

PROBE_SESSION = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
MAX_PROBE_SESSIONS = 4_096  # posters per run remembered (one per rank); a row stays small
MAX_PROBE_DROPPED = 1 << 53  # JSON's exact integers


def parse_probe_dropped(session: str | None, total: str | None) -> tuple[str, int] | None:
    """The ``X-Probe-Session`` / ``X-Probe-Dropped`` headers as (session, running total); None when
    no total was sent (a session alone says nothing), ``InputError`` naming the header when one is
    malformed. A total without a session counts under the session "" (one anonymous poster)."""
    if session is not None and not PROBE_SESSION.fullmatch(session):
        raise InputError("X-Probe-Session", f"1 to 64 of A-Z a-z 0-9 _ . : -, got {brief(session)}")
    if total is None:
        return None
    text = total.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 16 or int(text) > MAX_PROBE_DROPPED:
        raise InputError(
            "X-Probe-Dropped", f"must be an integer from 0 to {MAX_PROBE_DROPPED}, got {brief(total)}"
        )
    return session or "", int(text)


def note_probe_dropped(run: Run, session: str, total: int) -> bool:
    """Keep the largest running total a poster reported (a repeated or late batch carries an older,
    smaller one). Writes only when it grows; False when nothing changed (or the run already holds
    ``MAX_PROBE_SESSIONS`` other sessions: their sum still shows, this one is not added)."""
    if total <= int(run.probe_dropped.get(session, 0)):  # the common case: no write, no lock
        return False
    with transaction.atomic():  # SQLite: BEGIN IMMEDIATE; PostgreSQL: the row lock
        fresh = Run.objects.select_for_update().only("probe_dropped").get(pk=run.pk).probe_dropped
        if not isinstance(fresh, dict):
            fresh = {}
        if total <= int(fresh.get(session, 0)) or (session not in fresh and len(fresh) >= MAX_PROBE_SESSIONS):
            return False
        fresh[session] = total
        Run.objects.filter(pk=run.pk).update(probe_dropped=fresh)
    run.probe_dropped = fresh
    return True
