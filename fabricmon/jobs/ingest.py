"""Ingest of phase events: NDJSON batches and importer output, stored idempotently by event id.

Ingest speed matters (millions of events per run, ≥ 100,000 events/s per core): a batch is parsed
into numpy columns (``ndjson``), its event ids are claimed 64 sequence numbers at a time (one
upsert of ~20 ``EventIdSet`` rows that returns the bits it added — see ``columns.id_keys``), the
new events are stored as one compact ``EventBlock`` row (``blocks``), and the matrices are
updated once per (source, step, layer, phase) touched, from one vectorized scatter-add
(``matrices``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from django.conf import settings
from django.db import IntegrityError, connection, transaction

from collectors.traces.schema import PHASES, SOURCES
from fabricmon.base import counters
from fabricmon.jobs import blocks, matrices
from fabricmon.jobs.columns import (
    EventColumns,
    columns_from_rows,
    id_keys,
)
from fabricmon.jobs.models import (
    EventIdSet,
    Run,
)
from fabricmon.jobs.ndjson import parse_ndjson_columns
from fabricmon.jobs.sql import Deferred, PgArray, QmarkCursor, pg_cursor, sql_cursor
from fabricmon.jobs.validation import MAX_OFFSET_NS, InputError, LineError, ParsedBatch, validate_dicts

IMPORT_BATCH = 5_000


@dataclass
class IngestResult:
    """What happened to one batch: counts and each rejected line."""

    lines: int = 0
    stored: int = 0
    duplicates: int = 0
    rejected: list[LineError] = field(default_factory=list)
    report: dict[str, Any] | None = None  # a trace import's report (collectors.traces.report)

    @property
    def accepted(self) -> int:
        return self.stored + self.duplicates

    def as_dict(self, max_errors: int = 1_000) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "accepted": self.accepted,
            "stored": self.stored,
            "duplicates": self.duplicates,
            "rejected_count": len(self.rejected),
            "rejected": [e.as_dict() for e in self.rejected[:max_errors]],
        } | ({"report": self.report} if self.report is not None else {})

    def add(self, other: IngestResult, line_offset: int = 0) -> None:
        self.lines += other.lines
        self.stored += other.stored
        self.duplicates += other.duplicates
        self.rejected.extend(LineError(e.line + line_offset, e.field, e.reason) for e in other.rejected)


def store_batch(run: Run, batch: ParsedBatch) -> IngestResult:
    """Store a batch validated row by row (importers); see ``store_columns``."""
    result = store_columns(run, columns_from_rows(batch.rows, batch.peers))
    result.lines, result.rejected = batch.lines, list(batch.errors)
    count(result, "import")
    return result


def count(result: IngestResult, path: str) -> None:
    """Add a batch's outcome to the shared ingest counters (``/metrics``:
    ``fabricmon_ingest_events_total{path, outcome}``)."""
    counters.add({f"ingest_events:{path}:stored": result.stored,
                  f"ingest_events:{path}:duplicate": result.duplicates,
                  f"ingest_events:{path}:rejected": len(result.rejected),
                  f"ingest_batches:{path}": 1})


def _fresh_mask(run: Run, ids: list[str]) -> np.ndarray:
    """Claim each event id for the run; true where the claim is new. The database decides (so
    concurrent posts of one batch store it once), and a repeat inside the batch keeps its first
    occurrence. Ids go in as (key, bit) — ``columns.id_keys`` — ORed per key into one mask: one
    upsert row per key, in key order (two posts lock their common rows in the same order)."""
    keys, bit = id_keys(ids)
    order = np.lexsort((bit, keys))  # stable: the first occurrence of a (key, bit) comes first
    k_sorted, b_sorted = keys[order], bit[order]
    first = np.ones(len(keys), dtype=bool)
    first[1:] = (k_sorted[1:] != k_sorted[:-1]) | (b_sorted[1:] != b_sorted[:-1])
    first_at = order[first]
    todo, inverse = np.unique(k_sorted[first], return_inverse=True)
    masks = np.zeros(len(todo), dtype=np.uint64)
    np.bitwise_or.at(masks, inverse, np.left_shift(np.uint64(1), bit[first_at].astype(np.uint64)))
    single = (masks & (masks - np.uint64(1))) == 0  # rows of one id: a UUID-like id, a sparse number
    added = _claim(int(run.pk), todo, masks.view(np.int64), single)
    fresh = np.zeros(len(keys), dtype=bool)
    won = added.view(np.uint64)[inverse] >> bit[first_at].astype(np.uint64)
    fresh[first_at] = (won & np.uint64(1)) != 0
    return fresh


SINGLE_ID_INSERT_ROWS = 100  # PostgreSQL: this many rows of one id each try a plain INSERT first


def _claim(run_id: int, keys: np.ndarray, masks: np.ndarray, single: np.ndarray) -> np.ndarray:
    """OR ``masks`` into the run's ``EventIdSet`` rows ``keys`` (sorted, unique) in the caller's
    transaction; returns the bits each claim added (0 where all were there). ``ON CONFLICT DO
    UPDATE`` reads the row's newest committed version even under READ COMMITTED (it waits for a
    concurrent claim of the row, then sees its bits), so two posts of one batch cannot both win
    a bit; on SQLite the write transaction is ``BEGIN IMMEDIATE``. A row none of whose bits is new
    is not rewritten (a re-post writes nothing) and is not returned.

    ``single``: the rows claiming one id. A batch all of whose rows are (UUID-like ids: each id
    a row of its own) goes first as a plain INSERT in a savepoint on PostgreSQL: such rows are
    nearly always new, and the upsert's speculative insertion cost ~8.6 µs of backend CPU a row
    against ~4.8 for a plain INSERT; any taken row (a re-post, a concurrent post: the insert
    waits for it, then fails) sends the batch back to the upsert. Only a whole batch: each
    statement takes its rows in key order, and a batch split into two statements (its one-id
    rows, then the rest) would lock out of order — two such posts deadlocked in CI."""
    table = connection.ops.quote_name(EventIdSet._meta.db_table)
    added = np.zeros(len(keys), dtype=np.int64)
    rest = np.arange(len(keys))
    all_single = connection.vendor == "postgresql" and len(keys) >= SINGLE_ID_INSERT_ROWS and single.all()
    if all_single and _insert_new(run_id, keys, masks):
        added, rest = masks.copy(), rest[:0]
    rows = _upsert(run_id, table, keys[rest], masks[rest])  # (also with no rows: the run check)
    if rows:
        got = np.array(rows, dtype=np.int64)
        added[rest[np.searchsorted(keys[rest], got[:, 0])]] = got[:, 1]
    return added


def _insert_new(run_id: int, keys: np.ndarray, masks: np.ndarray) -> bool:
    """PostgreSQL: ``EventIdSet`` rows with a plain INSERT in a savepoint; false (nothing
    inserted) when any was taken."""
    import psycopg  # noqa: PLC0415  (PostgreSQL only)

    table = connection.ops.quote_name(EventIdSet._meta.db_table)
    with pg_cursor() as cursor:  # (the driver's own savepoint statements: Django's cost ~1 ms a batch)
        cursor.execute("SAVEPOINT fabricmon_claim")
        try:
            cursor.execute(f"INSERT INTO {table} (run_id, key_hash, bits, added) SELECT %s, k, b, b "
                           f"FROM unnest(%b::bigint[], %b::bigint[]) AS v(k, b)",
                           [run_id, PgArray(keys), PgArray(masks)])
        except psycopg.errors.UniqueViolation:
            cursor.execute("ROLLBACK TO SAVEPOINT fabricmon_claim")
            return False
        cursor.execute("RELEASE SAVEPOINT fabricmon_claim")
    return True


def _upsert(run_id: int, table: str, keys: np.ndarray, masks: np.ndarray) -> list[tuple[int, int]]:
    """The claim's upsert (see ``_claim``): the (key, added bits) of the rows it changed."""
    upsert = ("ON CONFLICT (run_id, key_hash) DO UPDATE SET bits = t.bits | excluded.bits, "
              "added = excluded.bits & ~t.bits WHERE excluded.bits & ~t.bits <> 0 RETURNING key_hash, added")
    if connection.vendor == "postgresql":  # with the run check (``_hold_run``): one round trip
        runs = connection.ops.quote_name(Run._meta.db_table)
        with pg_cursor() as cursor:
            cursor.execute(
                f"WITH run AS (SELECT id FROM {runs} WHERE id = %s FOR KEY SHARE), "
                f"won AS (INSERT INTO {table} AS t (run_id, key_hash, bits, added) SELECT run.id, k, b, b "
                f"FROM run, unnest(%b::bigint[], %b::bigint[]) AS v(k, b) {upsert}) "
                f"SELECT key_hash, added FROM won UNION ALL SELECT NULL, count(*) FROM run",
                [run_id, PgArray(keys), PgArray(masks)],
            )
            rows = cursor.fetchall()
        if not any(key is None and n for key, n in rows):
            raise IntegrityError(f"run {run_id} does not exist (deleted while its events were stored?)")
        rows = [r for r in rows if r[0] is not None]
    else:
        pairs = orjson.dumps(np.stack([keys, masks], axis=1), option=orjson.OPT_SERIALIZE_NUMPY).decode()
        with QmarkCursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} AS t (run_id, key_hash, bits, added) SELECT %s, "
                f"json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[1]') "
                f"FROM json_each(%s) WHERE true {upsert}",
                [run_id, pairs],
            )
            rows = cursor.fetchall()
    return rows


def store_columns(run: Run, cols: EventColumns) -> IngestResult:
    """Store validated columns as one ``EventBlock``; events whose id the run already has are
    counted as duplicates, not stored. Matrices and the block index are updated in the same
    transaction."""
    result = IngestResult(lines=len(cols))
    if not len(cols):
        return result
    with transaction.atomic():
        fresh = _fresh_mask(run, cols.event_id)
        result.stored = int(fresh.sum())
        result.duplicates = len(cols) - result.stored
        if not result.stored:
            return result
        if connection.vendor != "postgresql":  # (PostgreSQL: checked with the claim)
            _hold_run(run)
        new = cols if result.duplicates == 0 else cols.select(fresh)
        keys, inverse = _group_keys(new)
        deferred = Deferred()  # the matrices' writes go with the block's statement (PostgreSQL)
        matrices.add_events(run, new, keys, inverse, deferred)
        blocks.insert_block(run, new, keys, np.bincount(inverse, minlength=len(keys)), deferred)
    return result


def _hold_run(run: Run) -> None:
    """The run row exists, and (PostgreSQL) stays until this transaction ends: the blocks, key
    index and matrices have no database foreign key (``models.EventBlock.run``), so this one
    check per batch is what their ~250 deferred per-row checks did. ``FOR KEY SHARE`` is the lock
    such a check takes: it blocks a delete of the run, not its updates or other batches. (SQLite:
    the write transaction is ``BEGIN IMMEDIATE``, so no delete can come between. PostgreSQL's
    ingest makes the same check inside its claim statement: ``_claim``.)"""
    table = connection.ops.quote_name(Run._meta.db_table)
    lock = " FOR KEY SHARE" if connection.vendor == "postgresql" else ""
    with sql_cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {table} WHERE id = %s{lock}", [int(run.pk)])
        if cursor.fetchone() is None:
            raise IntegrityError(f"run {run.pk} does not exist (deleted while its events were stored?)")


def _group_keys(cols: EventColumns) -> tuple[list[tuple[str, int, int, str]], np.ndarray]:
    """The distinct (source, step, layer, phase) of the events, and each event's group index.
    Usually packed into one int64 (a 1-D unique is ~10x faster than ``np.unique(axis=0)``)."""
    step, layer = cols.step + 1, cols.layer + 1  # -1 (none) → 0
    if len(cols) and step.max() < 1 << 38 and layer.max() < 1 << 18:
        packed = (((step << 18) | layer) << 7) | (cols.phase << 3) | cols.source  # 10 phases, 7 sources
        uniq, inverse = np.unique(packed, return_inverse=True)
        u_step, u_layer = (uniq >> 25) - 1, ((uniq >> 7) & ((1 << 18) - 1)) - 1
        u_phase, u_source = (uniq >> 3) & 15, uniq & 7
        rows = zip(u_source.tolist(), u_step.tolist(), u_layer.tolist(), u_phase.tolist(), strict=True)
    else:
        stacked = np.stack([cols.source, cols.step, cols.layer, cols.phase], axis=1)
        uniq, inverse = np.unique(stacked, axis=0, return_inverse=True)
        rows = iter(uniq.tolist())
    keys = [(SOURCES[s], st, la, PHASES[p]) for s, st, la, p in rows]
    return keys, inverse.reshape(-1)


def rank_limit(run: Run) -> int:
    """Ranks of ``run`` are below this: its world_size, or ``FABRICMON_MAX_RANKS`` when it declares
    none. The matrices are rank × rank: without this bound one 1 KB line with rank 3000 made
    720 MB of them."""
    return int(run.world_size or settings.FABRICMON_MAX_RANKS)


def ingest_ndjson(run: Run, body: bytes, clock_offset_ns: int = 0, max_lines: int = 100_000) -> IngestResult:
    """Validate and store one NDJSON batch: valid lines are kept, bad ones reported by number."""
    if not -MAX_OFFSET_NS <= clock_offset_ns <= MAX_OFFSET_NS:
        raise InputError("X-Clock-Offset-Ns", f"must be within ±{MAX_OFFSET_NS} ns")
    cols, errors, lines = parse_ndjson_columns(body, clock_offset_ns, max_lines, rank_limit(run))
    result = store_columns(run, cols)
    result.lines, result.rejected = lines, errors
    count(result, "api")
    return result


def ingest_events(
    run: Run,
    events: Iterable[dict[str, Any]],
    batch_size: int = IMPORT_BATCH,
    on_batch: Callable[[IngestResult], None] | None = None,
) -> IngestResult:
    """Store a stream of decoded events (importers) in bounded batches; ``on_batch`` sees the
    running totals after each one."""
    total = IngestResult()
    chunk: list[dict[str, Any]] = []
    max_rank = rank_limit(run)
    for event in events:
        chunk.append(event)
        if len(chunk) >= batch_size:
            total.add(store_batch(run, validate_dicts(chunk, max_rank=max_rank)), total.lines)
            chunk = []
            if on_batch is not None:
                on_batch(total)
    if chunk:
        total.add(store_batch(run, validate_dicts(chunk, max_rank=max_rank)), total.lines)
    return total


def forget_event_ids(run: Run, ids: list[str]) -> int:
    """Let the idempotency keys of deleted events go (retention): a re-post of such an old event
    would be stored again, which is what retention means. Returns how many keys were cleared."""
    if not ids:
        return 0
    keys, bit = id_keys(ids)
    todo, inverse = np.unique(keys, return_inverse=True)
    masks = np.zeros(len(todo), dtype=np.uint64)
    np.bitwise_or.at(masks, inverse, np.left_shift(np.uint64(1), bit.astype(np.uint64)))
    wanted = dict(zip(todo.tolist(), masks.view(np.int64).tolist(), strict=True))
    gone = 0
    rows = EventIdSet.objects.filter(run=run)
    for at in range(0, len(todo), 5000):  # not a hot path: the ORM
        part = todo[at : at + 5000].tolist()
        for key, bits in rows.filter(key_hash__in=part).values_list("key_hash", "bits"):
            clear = bits & wanted[key]
            gone += (clear & (2**64 - 1)).bit_count()
            if clear == bits:
                rows.filter(key_hash=key).delete()
            elif clear:
                rows.filter(key_hash=key).update(bits=bits & ~clear)
    return gone
