"""Runs and what their owners say about them: create, tag and end a run; store its rank map.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fabricmon.jobs.models import (
    RankMapEntry,
    Run,
)
from fabricmon.jobs.validation import InputError, LineError, brief

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


def create_run(owner: Any, name: str, tags: Any = (), fabric: str = "", world_size: int | None = None) -> Run:
    """A new running run; every argument checked (``InputError`` naming the field)."""
    if not isinstance(name, str) or not name or len(name) > 200:
        raise InputError("name", "required, a string of 1 to 200 characters")
    max_world = settings.FABRICMON_MAX_WORLD_SIZE
    if isinstance(world_size, float) and world_size.is_integer():  # JSON's 8.0 is the integer 8
        world_size = int(world_size)
    if world_size is not None and (type(world_size) is not int or not 0 < world_size <= max_world):
        raise InputError("world_size", f"must be an integer from 1 to {max_world}, got {brief(world_size)}")
    if not isinstance(fabric, str) or len(fabric) > 100:
        raise InputError("fabric", "must be a string of at most 100 characters")
    return Run.objects.create(
        owner=owner, name=name.strip() or name, tags=clean_tags(list(tags) if type(tags) is tuple else tags),
        fabric=fabric, world_size=world_size,
    )


def set_tags(run: Run, tags: Any) -> Run:
    run.tags = clean_tags(tags)
    run.save(update_fields=["tags"])
    return run


def end_run(run: Run, state: str = Run.State.FINISHED) -> Run:
    if state not in (Run.State.FINISHED, Run.State.FAILED, Run.State.CANCELLED):
        raise InputError("state", "must be one of finished, failed, cancelled")
    run.state, run.ended_at = state, timezone.now()
    run.save(update_fields=["state", "ended_at"])
    return run


# --- rank maps ----------------------------------------------------------------------------------

_RANK_STR_FIELDS = {"gpu": 64, "nic": 64, "switch": 100, "switch_port": 100}  # their column lengths


def store_rank_map(run: Run, entries: Iterable[Any], source: str = "upload") -> tuple[int, list[LineError]]:
    """Upsert rank → host/GPU/NIC/port rows; returns (stored, per-entry errors)."""
    good: dict[int, RankMapEntry] = {}
    errors: list[LineError] = []
    max_rank = int(run.world_size or settings.FABRICMON_MAX_RANKS)
    for n, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict):
            errors.append(LineError(n, "", "entry must be an object"))
            continue
        rank, host, local_rank = entry.get("rank"), entry.get("host"), entry.get("local_rank")
        if type(rank) is not int or not 0 <= rank < max_rank:
            errors.append(LineError(n, "rank", f"required, an integer from 0 to {max_rank - 1} (the run's "
                                    f"world_size, or FABRICMON_MAX_RANKS), got {brief(rank)}"))
            continue
        if not isinstance(host, str) or not host or len(host) > 200:
            errors.append(LineError(n, "host", "required, a non-empty string of at most 200 characters"))
            continue
        if local_rank is not None and (type(local_rank) is not int or not 0 <= local_rank < max_rank):
            errors.append(LineError(n, "local_rank", f"must be an integer from 0 to {max_rank - 1}"))
            continue
        bad = next(
            (f for f, most in _RANK_STR_FIELDS.items()
             if not isinstance(entry.get(f, ""), str | None) or len(entry.get(f) or "") > most),
            None,
        )
        if bad:
            most = _RANK_STR_FIELDS[bad]
            errors.append(LineError(n, bad, f"must be a string of at most {most} characters"))
            continue
        good[rank] = RankMapEntry(
            run=run,
            rank=rank,
            host=host,
            local_rank=local_rank,
            source=source,
            **{f: str(entry.get(f, "") or "") for f in _RANK_STR_FIELDS},
        )
    with transaction.atomic():
        RankMapEntry.objects.bulk_create(
            good.values(),
            update_conflicts=True,
            unique_fields=["run", "rank"],
            update_fields=["host", "local_rank", "source", *_RANK_STR_FIELDS],
        )
    return len(good), errors
