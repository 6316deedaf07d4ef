"""Event blocks: the one owner of ``EventBlock`` and ``EventBlockKey`` rows.

A run's events are stored as compact columnar blocks, one per ingested batch
(``columns.encode_block``), each indexed by its start times and by the (source, step, layer,
phase) keys it holds. Ingest writes them here; every reader — the export, the run page, the phase
views, the phase markers, an alert's culprit — reads them here, and only the blocks it needs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import numpy as np
import orjson
from asgiref.sync import sync_to_async
from django.db import connection
from django.db.models import Count, F, Max, Min, Sum
from django.db.models.functions import Length
from django.utils import timezone

from collectors.traces.schema import PHASES, SOURCES
from fabricmon.jobs.columns import (
    EventColumns,
    block_event_ids,
    concat,
    decode_block,
    decode_fields,
    empty_columns,
    encode_block,
    iter_dicts,
)
from fabricmon.jobs.models import (
    EventBlock,
    EventBlockKey,
    Run,
)
from fabricmon.jobs.sql import PG_TYPES, Deferred, QmarkCursor, insert_columns, pg_arrays, pg_cursor

NO_VALUE = -1  # a matrix's step/layer when the events had none (a real value keeps the unique key working)


_KEY_COLUMNS = ("source", "step", "layer_min", "layer_max", "phases", "events")


def _step_keys(keys: list[tuple[str, int, int, str]], counts: np.ndarray) -> list[Any]:
    """The block's (source, step, layer, phase) keys with their event counts → one index row per
    (source, step): its layers' range, a bit per phase, its events (columns ``_KEY_COLUMNS``)."""
    rows: dict[tuple[str, int], list[int]] = {}
    for (source, step, layer, phase), n in zip(keys, counts.tolist(), strict=True):
        row = rows.get((source, step))
        bit = 1 << PHASE_BIT[phase]
        if row is None:
            rows[(source, step)] = [layer, layer, bit, n]
        else:
            row[0], row[1] = min(row[0], layer), max(row[1], layer)
            row[2] |= bit
            row[3] += n
    sources = [k[0] for k in rows]
    ints = np.array([[k[1], *v] for k, v in rows.items()], dtype=np.int64).reshape(-1, 5)
    return [sources, *ints.T]


PHASE_BIT = {p: i for i, p in enumerate(PHASES)}


def insert_block(
    run: Run, cols: EventColumns, keys: list[tuple[str, int, int, str]], counts: np.ndarray,
    deferred: Deferred | None = None,
) -> int:
    """One ``EventBlock`` row and its key-index rows (from ``keys`` with their event ``counts``: one
    per (source, step)), raw SQL in the caller's transaction (the ORM's create costs ~0.5 µs an
    event here). Returns its id. PostgreSQL: both in one statement (one round trip) with the
    ``deferred`` statements (the matrices' writes), the blobs and the key columns as binary
    parameters (not 200 KB of quoted hex)."""
    blob, peers = encode_block(cols)
    start_min, start_max = int(cols.start_ns.min()), int(cols.start_ns.max())
    block_table = connection.ops.quote_name(EventBlock._meta.db_table)
    key_table = connection.ops.quote_name(EventBlockKey._meta.db_table)
    head = (
        f"INSERT INTO {block_table} "
        "(run_id, n_events, start_ns_min, start_ns_max, columns, peers, created_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id"
    )
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    row = [run.pk, len(cols), start_min, start_max, blob, peers, now]
    key_values = _step_keys(keys, counts)
    if connection.vendor == "postgresql":
        arrays = ", ".join(f"%b::{PG_TYPES[c]}[]" for c in _KEY_COLUMNS)
        more, more_params = deferred.ctes() if deferred is not None else ("", [])
        with pg_cursor() as cursor:
            cursor.execute(
                f"WITH block AS ({head}), _ AS (INSERT INTO {key_table} "
                f"(run_id, block_id, {', '.join(_KEY_COLUMNS)}) SELECT %s, block.id, k.* FROM block, "
                f"unnest({arrays}) AS k){more} SELECT id FROM block",
                [*row, run.pk, *pg_arrays(_KEY_COLUMNS, key_values), *more_params],
            )
            return int(cursor.fetchone()[0])
    with QmarkCursor() as cursor:
        cursor.execute(head, row)
        block_id = int(cursor.fetchone()[0])
        n = len(key_values[0])
        insert_columns(cursor, key_table, ("run_id", "block_id", *_KEY_COLUMNS),
                       [np.full(n, run.pk), np.full(n, block_id), *key_values])
    return block_id


def _keys_matching(run: Run, where: dict[str, Any]) -> Any:
    """The run's index rows whose block may hold events matching ``where`` (source/step/layer/phase,
    all given): a superset when a block's layers or phases are mixed (readers mask the events)."""
    keys = EventBlockKey.objects.filter(run=run)
    if "source" in where:
        keys = keys.filter(source=where["source"])
    if "step" in where:
        keys = keys.filter(step=where["step"])
    if "layer" in where:
        keys = keys.filter(layer_min__lte=where["layer"], layer_max__gte=where["layer"])
    if "phase" in where:
        if where["phase"] not in PHASE_BIT:
            return keys.none()
        bit = 1 << PHASE_BIT[where["phase"]]
        keys = keys.annotate(has_phase=F("phases").bitand(bit)).filter(has_phase__gt=0)
    return keys


def _block_filter(run: Run, **where: Any) -> Any:
    """Blocks of the run that may hold events matching ``where`` (source/step/layer/phase), by time."""
    blocks = EventBlock.objects.filter(run=run)
    where = {k: v for k, v in where.items() if v is not None}
    if where:
        blocks = blocks.filter(pk__in=_keys_matching(run, where).values("block_id"))
    return blocks.order_by("start_ns_min", "id")


def _mask(cols: EventColumns, where: dict[str, Any]) -> np.ndarray:
    mask = np.ones(len(cols), dtype=bool)
    codes = {"source": SOURCES, "phase": PHASES}
    for key, value in where.items():
        if value is None:
            continue
        if key in codes:
            mask &= getattr(cols, key) == (codes[key].index(value) if value in codes[key] else -99)
        else:
            mask &= getattr(cols, key) == (NO_VALUE if value == NO_VALUE else int(value))
    return mask


def event_columns(
    run: Run,
    *,
    source: str | None = None,
    step: int | None = None,
    layer: int | None = None,
    phase: str | None = None,
) -> EventColumns:
    """The run's events matching every given filter (step/layer -1 = events without one) as
    numpy columns, sorted by start_ns; reads only the blocks the key index points at."""
    where = {"source": source, "step": step, "layer": layer, "phase": phase}
    parts = []
    for blob, peers in _block_filter(run, **where).values_list("columns", "peers").iterator(chunk_size=64):
        cols = decode_block(blob, peers)
        parts.append(cols.select(_mask(cols, where)))
    cols = concat(parts)
    order = np.argsort(cols.start_ns, kind="stable")
    return cols if len(cols) < 2 or (order == np.arange(len(cols))).all() else cols.take(order)


def iter_events(run: Run, *, source: str | None = None, phase: str | None = None) -> Iterator[dict[str, Any]]:
    """The run's events as dicts (``columns.EXPORT_FIELDS`` + per-peer maps) in start_ns order
    (ties in arrival order), streamed: blocks are read in start order and merged, so memory holds
    only the blocks whose times overlap."""
    where = {"source": source, "phase": phase}
    blocks = _block_filter(run, **where).values_list("start_ns_min", "columns", "peers")
    pending = empty_columns()
    for start_min, blob, peers in blocks.iterator(chunk_size=16):
        ready = pending.start_ns < start_min  # nothing later can start before this block does
        if ready.any():
            yield from _sorted_dicts(pending.select(ready))
            pending = pending.select(~ready)
        cols = decode_block(blob, peers)
        pending = concat([pending, cols.select(_mask(cols, where))])
    yield from _sorted_dicts(pending)


EXPORT_BLOCKS_PER_READ = 8  # blocks fetched per database round trip of the export


async def aiter_event_lines(
    run: Run, *, source: str | None = None, phase: str | None = None
) -> AsyncIterator[bytes]:
    """The run's events as NDJSON chunks, for an ASGI response: an *async* iterator, so Django
    streams it (a sync iterator under ASGI is collected into a list first — 319 k events gave no
    first byte in 300 s). Same order and merge as :func:`iter_events`: blocks are read in start
    order, ``EXPORT_BLOCKS_PER_READ`` at a time in a worker thread, and memory holds only the
    blocks whose times overlap plus one chunk of lines."""
    where = {"source": source, "phase": phase}
    order = await sync_to_async(lambda: list(
        _block_filter(run, **where).values_list("id", "start_ns_min")))()
    pending = empty_columns()
    for at in range(0, len(order), EXPORT_BLOCKS_PER_READ):
        ids = [bid for bid, _ in order[at : at + EXPORT_BLOCKS_PER_READ]]
        parts = await sync_to_async(_decoded)(ids, where)
        for (_, start_min), cols in zip(order[at : at + len(ids)], parts, strict=True):
            ready = pending.start_ns < start_min  # nothing later can start before this block does
            if ready.any():
                yield _ndjson(pending.select(ready))
                pending = pending.select(~ready)
            pending = concat([pending, cols])
    if len(pending):
        yield _ndjson(pending)


def _decoded(ids: list[int], where: dict[str, Any]) -> list[EventColumns]:
    rows = EventBlock.objects.filter(pk__in=ids).values_list("id", "columns", "peers")
    blobs = {bid: (c, p) for bid, c, p in rows}
    out = []
    for bid in ids:
        cols = decode_block(*blobs[bid])
        out.append(cols.select(_mask(cols, where)))
    return out


def _ndjson(cols: EventColumns) -> bytes:
    """Export lines in the ingest format, so a re-import stores exactly what is stored: each line's
    ``start_ns``/``end_ns`` as the host reported them and its ``clock_offset_ns`` (server − host,
    which ingest adds back). Stored times are server times: exporting them beside the offset made a
    re-import add the offset twice. Lines stay in server-time order."""
    order = np.argsort(cols.start_ns, kind="stable")
    return b"".join(orjson.dumps(e) + b"\n" for e in iter_dicts(cols, order, host_times=True))


def _sorted_dicts(cols: EventColumns) -> Iterator[dict[str, Any]]:
    return iter_dicts(cols, np.argsort(cols.start_ns, kind="stable"))


def event_count(run: Run, *, source: str | None = None) -> int:
    """How many events the run has stored (from the block index, no block is read)."""
    if source is None:
        return int(EventBlock.objects.filter(run=run).aggregate(n=Sum("n_events"))["n"] or 0)
    return int(EventBlockKey.objects.filter(run=run, source=source).aggregate(n=Sum("events"))["n"] or 0)


def event_ids(run: Run) -> list[str]:
    """Every stored event id of the run, in arrival order (tests, audits)."""
    ids: list[str] = []
    for blob in EventBlock.objects.filter(run=run).order_by("id").values_list("columns", flat=True):
        ids.extend(block_event_ids(blob))
    return ids


# --- what the phase views, markers and alerts read ---------------------------------------------

# The longest a phase event can last and still be found from its start: a block whose newest
# event started this long before a window cannot hold an event still running in it. A collective
# call lasts milliseconds to seconds; a minute is a wide margin and still skips almost every block.
MAX_PHASE_NS = 60 * 1_000_000_000


def fingerprint(run_id: int) -> tuple[int, int | None]:
    """(blocks, newest block id) of the run: changes whenever a batch is stored (one query)."""
    agg = EventBlock.objects.filter(run_id=run_id).aggregate(n=Count("id"), top=Max("id"))
    return int(agg["n"]), agg["top"]


def block_ids(
    run: Run, *, min_step: int | None = None, max_step: int | None = None, ending_after: int | None = None
) -> set[int]:
    """The run's block ids; or those holding events of steps in [min_step, max_step] (by the key
    index); or those that can hold an event ending at or after ``ending_after`` ns. A reader
    keeps the set it has folded in: on PostgreSQL a block can commit after one with a higher id,
    so "id > newest" would miss it."""
    if ending_after is not None:
        later = EventBlock.objects.filter(run=run, start_ns_max__gte=ending_after - MAX_PHASE_NS)
        return set(later.values_list("id", flat=True))
    if min_step is None and max_step is None:
        return set(EventBlock.objects.filter(run=run).values_list("id", flat=True))
    keys = EventBlockKey.objects.filter(run=run)
    if min_step is not None:
        keys = keys.filter(step__gte=min_step)
    if max_step is not None:
        keys = keys.filter(step__lte=max_step)
    return set(keys.values_list("block_id", flat=True).distinct())


def _steps(run: Run, source: str | None) -> Any:
    keys = EventBlockKey.objects.filter(run=run, step__gte=0, layer_max__gte=0)
    return keys.filter(source=source) if source else keys


def newest_steps(run: Run, count: int, *, source: str | None = None, before: int | None = None) -> list[int]:
    """The ``count`` newest steps the run reported events for (below ``before`` if given), newest
    first — from the key index, no block is read."""
    keys = _steps(run, source)
    if before is not None:
        keys = keys.filter(step__lt=before)
    return list(keys.values_list("step", flat=True).distinct().order_by("-step")[:count])


def step_span(run: Run, *, source: str | None = None) -> tuple[int, int] | None:
    """(first, last) step the run reported events for, None when it reported none."""
    agg = _steps(run, source).aggregate(lo=Min("step"), hi=Max("step"))
    return None if agg["lo"] is None else (int(agg["lo"]), int(agg["hi"]))


def read_blocks(ids: Iterable[int]) -> Iterator[tuple[int, EventColumns]]:
    """The blocks ``ids`` decoded, per-peer arrays included, in id order, 64 rows a fetch."""
    rows = EventBlock.objects.filter(pk__in=list(ids)).order_by("id").values_list("id", "columns", "peers")
    for block_id, blob, peers in rows.iterator(chunk_size=64):
        yield int(block_id), decode_block(blob, peers)


def read_block_fields(
    ids: Iterable[int], names: tuple[str, ...]
) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """Only the named per-event columns of the blocks ``ids`` (their per-peer blobs are not even
    fetched), in id order: what the phase views fold in."""
    rows = EventBlock.objects.filter(pk__in=list(ids)).order_by("id").values_list("id", "columns")
    for block_id, blob in rows.iterator(chunk_size=64):
        yield int(block_id), decode_fields(blob, names)


def columns_near(run: Run, t1_ns: int, t2_ns: int) -> EventColumns:
    """The run's events that may overlap [t1, t2]: only blocks whose start times come near the window
    are decoded (a run holds millions of events; an alert window a few seconds). Callers apply the
    exact overlap test per event."""
    blobs = EventBlock.objects.filter(
        run=run, start_ns_min__lte=t2_ns, start_ns_max__gte=t1_ns - MAX_PHASE_NS
    ).values_list("columns", "peers")
    return concat([decode_block(b, p) for b, p in blobs.iterator(chunk_size=16)])


def columns_ending_after(run: Run, since_ns: int) -> EventColumns:
    """The run's events of every block that can hold one ending at or after ``since_ns`` (by the
    blocks' ``start_ns_max``), in start order: a poll from ``since_ns`` costs the new span."""
    blobs = (
        EventBlock.objects.filter(run=run, start_ns_max__gte=since_ns - MAX_PHASE_NS)
        .order_by("start_ns_min", "id")
        .values_list("columns", "peers")
    )
    return concat([decode_block(b, p) for b, p in blobs.iterator(chunk_size=64)])


def time_span(run: Run) -> tuple[int, int] | None:
    """(first start, last start) of the run's events from the block index, None without events."""
    agg = EventBlock.objects.filter(run=run).aggregate(lo=Min("start_ns_min"), hi=Max("start_ns_max"))
    return None if agg["lo"] is None else (int(agg["lo"]), int(agg["hi"]))


def fields_near(run: Run, t1_ns: int, t2_ns: int, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Only the named integer columns of the events that may overlap [t1, t2] (as
    :func:`columns_near` picks blocks): what an aggregate such as the run timeline needs."""
    blobs = EventBlock.objects.filter(
        run=run, start_ns_min__lte=t2_ns, start_ns_max__gte=t1_ns - MAX_PHASE_NS
    ).values_list("columns", flat=True)
    parts = [decode_fields(b, names) for b in blobs.iterator(chunk_size=64)]
    if not parts:
        return {n: np.zeros(0, np.int64) for n in names}
    return {n: np.concatenate([p[n] for p in parts]) for n in names}


# --- retention (jobs.retention decides, this module deletes) -----------------------------------

def delete_blocks(ids: Iterable[int]) -> tuple[int, int, list[str]]:
    """Delete event blocks (their key-index rows go with them). Returns (blocks, events, the
    deleted events' ids) — the ids so the caller can let their idempotency keys go too."""
    todo = list(ids)
    if not todo:
        return 0, 0, []
    gone: list[str] = []
    events = 0
    rows = EventBlock.objects.filter(pk__in=todo).values_list("columns", "n_events")
    for blob, n in rows.iterator(chunk_size=64):
        gone.extend(block_event_ids(blob))
        events += int(n)
    deleted = EventBlock.objects.filter(pk__in=todo).delete()[1].get(EventBlock._meta.label, 0)
    return int(deleted), events, gone


def block_steps(run: Run) -> list[tuple[int, int, int]]:
    """(block id, newest step it holds, its bytes) for every block of the run (one query each)."""
    newest = dict(EventBlockKey.objects.filter(run=run).values("block_id").annotate(top=Max("step"))
                  .values_list("block_id", "top"))
    sizes = EventBlock.objects.filter(run=run).annotate(size=Length("columns") + Length("peers")).values_list(
        "id", "size")
    return [(int(b), int(newest.get(b, -1)), int(size or 0)) for b, size in sizes]


def stored_bytes(run: Run) -> tuple[int, int]:
    """(bytes of the run's event blocks, events they hold)."""
    agg = EventBlock.objects.filter(run=run).aggregate(size=Sum(Length("columns")) + Sum(Length("peers")),
                                                       n=Sum("n_events"))
    return int(agg["size"] or 0), int(agg["n"] or 0)
