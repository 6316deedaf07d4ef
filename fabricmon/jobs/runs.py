"""Runs and what their owners say about them: create, tag and end a run; store its rank map.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.utils import timezone

from fabricmon.jobs.models import (
    RankMapEntry,
    Run,
)
from fabricmon.jobs.validation import InputError, LineError

MAX_TAGS, MAX_TAG_LEN = 64, 100


def clean_tags(tags: Any) -> list[str]:
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise InputError("tags", "must be a list of strings")
    cleaned = sorted({t.strip() for t in tags if t.strip()})
    if len(cleaned) > MAX_TAGS or any(len(t) > MAX_TAG_LEN for t in cleaned):
        raise InputError("tags", f"at most {MAX_TAGS} tags of at most {MAX_TAG_LEN} characters")
    return cleaned


def create_run(owner: Any, name: str, tags: Any = (), fabric: str = "", world_size: int | None = None) -> Run:
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise InputError("name", "required, a string of at most 200 characters")
    if world_size is not None and (type(world_size) is not int or world_size <= 0):
        raise InputError("world_size", "must be a positive integer")
    if not isinstance(fabric, str):
        raise InputError("fabric", "must be a string")
    return Run.objects.create(
        owner=owner, name=name.strip(), tags=clean_tags(list(tags)), fabric=fabric, world_size=world_size
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

_RANK_STR_FIELDS = ("gpu", "nic", "switch", "switch_port")


def store_rank_map(run: Run, entries: Iterable[Any], source: str = "upload") -> tuple[int, list[LineError]]:
    """Upsert rank → host/GPU/NIC/port rows; returns (stored, per-entry errors)."""
    good: dict[int, RankMapEntry] = {}
    errors: list[LineError] = []
    for n, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict):
            errors.append(LineError(n, "", "entry must be an object"))
            continue
        rank, host, local_rank = entry.get("rank"), entry.get("host"), entry.get("local_rank")
        if type(rank) is not int or rank < 0:
            errors.append(LineError(n, "rank", "required, a non-negative integer"))
            continue
        if not isinstance(host, str) or not host:
            errors.append(LineError(n, "host", "required, a non-empty string"))
            continue
        if local_rank is not None and (type(local_rank) is not int or local_rank < 0):
            errors.append(LineError(n, "local_rank", "must be a non-negative integer"))
            continue
        bad = next((f for f in _RANK_STR_FIELDS if not isinstance(entry.get(f, ""), str)), None)
        if bad:
            errors.append(LineError(n, bad, "must be a string"))
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
