"""Ingest of phase events: NDJSON batches and importer output, stored idempotently by event id.

Ingest speed matters (millions of events per run, ≥ 50,000 events/s per core): a batch is parsed
into numpy columns (``ndjson``), its event ids are claimed as 64-bit hashes (PostgreSQL: a plain
``INSERT`` in a savepoint, ``INSERT … ON CONFLICT DO NOTHING RETURNING`` when some id was
taken; SQLite: a read-only lookup in the big key table and one sorted blob per batch in front of
it, merged in bulk — see ``models.RecentKeyBatch``), the new events are stored as one compact
``EventBlock`` row (``blocks``), and the matrices are updated once per (source, step, layer,
phase) touched, from one vectorized scatter-add (``matrices``).
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
    id_hashes,
)
from fabricmon.jobs.models import (
    EventKey,
    RecentKeyBatch,
    Run,
)
from fabricmon.jobs.ndjson import parse_ndjson_columns
from fabricmon.jobs.sql import PgArray, QmarkCursor, pg_cursor, sql_cursor
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


def _fresh_mask(run: Run, hashes: np.ndarray) -> np.ndarray:
    """Claim each event's id hash for the run; true where the claim is new. The database decides
    (so concurrent posts of one batch store it once), and a repeat inside the batch keeps its
    first occurrence. Keys go in sorted (``np.unique``'s order): neighbouring inserts land on the
    same B-tree pages. (PostgreSQL: a read-only lookup and recent blobs as on SQLite measured
    ~1.8 µs of backend CPU a key for the lookup plus ~2 for the later merge, against ~4.7 for
    ``ON CONFLICT``: not worth a per-run lock.)"""
    todo, first = np.unique(hashes, return_index=True)
    table = connection.ops.quote_name(EventKey._meta.db_table)
    run_id = int(run.pk)
    if connection.vendor == "postgresql" and _claim_all_pg(run_id, table, todo):
        won = todo
    elif connection.vendor == "postgresql":  # one array parameter: no 1,000-row VALUES list to parse
        with pg_cursor() as cursor:  # the won keys only when some claim was lost (a re-post)
            cursor.execute(
                f"WITH won AS (INSERT INTO {table} (run_id, id_hash) SELECT %s, unnest(%b::bigint[]) "
                "ON CONFLICT DO NOTHING RETURNING id_hash) "
                "SELECT count(*), CASE WHEN count(*) < %s THEN array_agg(id_hash) END FROM won",
                [run_id, PgArray(todo), len(todo)],
            )
            n_won, lost = cursor.fetchone()
            won = todo if n_won == len(todo) else np.sort(np.array(lost or [], dtype=np.int64))
    else:
        won = _claim_sqlite(run_id, todo)
    fresh = np.zeros(len(hashes), dtype=bool)
    if len(won) == len(todo):  # the common case: every claim is new
        fresh[first] = True
    elif len(won):  # both sorted: place the won hashes by binary search
        fresh[first[np.searchsorted(todo, won)]] = True
    return fresh


def _claim_all_pg(run_id: int, table: str, todo: np.ndarray) -> bool:
    """PostgreSQL: claim every key with a plain INSERT in a savepoint; false (nothing claimed)
    if any was taken — a re-post, or a concurrent post of the same ids (the insert waits for
    that transaction, then fails): the caller then claims with ``ON CONFLICT``. A batch of new
    ids is the usual case, and ``ON CONFLICT``'s speculative insertion measured ~11 µs of backend
    CPU a key against ~6.5 for the plain insert; the unique index still decides."""
    import psycopg  # noqa: PLC0415  (PostgreSQL only)

    with pg_cursor() as cursor:  # (the driver's own savepoint statements: Django's cost ~1 ms a batch)
        cursor.execute("SAVEPOINT fabricmon_claim")
        try:
            cursor.execute(f"INSERT INTO {table} (run_id, id_hash) SELECT %s, unnest(%b::bigint[])",
                           [run_id, PgArray(todo)])
        except psycopg.errors.UniqueViolation:
            cursor.execute("ROLLBACK TO SAVEPOINT fabricmon_claim")
            return False
        cursor.execute("RELEASE SAVEPOINT fabricmon_claim")
    return True


KEY_MERGE_BLOCKS = 32  # SQLite: recent key blobs move into EventKey every this many blocks


def _claim_sqlite(run_id: int, todo: np.ndarray) -> np.ndarray:
    """Claim sorted unique hashes on SQLite; returns the new ones (sorted). Runs inside the
    caller's write transaction (``BEGIN IMMEDIATE``: no other writer between the checks and the
    insert): keys already in the big ``EventKey`` tree are found with a read-only lookup (a JSON
    array parameter read by json_each: SQLite parses a 1,000-row VALUES list at ~2 µs a row, the
    JSON at ~0.3 µs), keys in the run's recent blobs by binary search, and the rest are appended
    as one ``RecentKeyBatch`` blob."""
    big = connection.ops.quote_name(EventKey._meta.db_table)
    recent = connection.ops.quote_name(RecentKeyBatch._meta.db_table)
    ids = orjson.dumps(todo, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    with QmarkCursor() as cursor:
        cursor.execute(
            f"SELECT id_hash FROM {big} WHERE run_id = %s AND id_hash IN (SELECT value FROM json_each(%s))",
            [run_id, ids],
        )
        seen = np.isin(todo, np.array([r[0] for r in cursor.fetchall()], dtype=np.int64))
        cursor.execute(f"SELECT hashes FROM {recent} WHERE run_id = %s", [run_id])
        for (blob,) in cursor.fetchall():
            keys = np.frombuffer(blob, dtype="<i8")
            at = np.minimum(np.searchsorted(keys, todo), len(keys) - 1)
            seen |= keys[at] == todo
        new = todo[~seen] if seen.any() else todo
        if len(new):
            cursor.execute(
                f"INSERT INTO {recent} (run_id, hashes) VALUES (%s, %s)",
                [run_id, new.astype("<i8", copy=False).tobytes()],
            )
    return new


def _merge_recent_keys() -> None:
    """Move every recent key (all runs) into ``EventKey``, in key order, in the caller's
    transaction (the recent blobs and the big tree are disjoint: a plain INSERT)."""
    big = connection.ops.quote_name(EventKey._meta.db_table)
    recent = connection.ops.quote_name(RecentKeyBatch._meta.db_table)
    with QmarkCursor() as cursor:
        cursor.execute(f"SELECT run_id, hashes FROM {recent} ORDER BY run_id")
        by_run: dict[int, list[np.ndarray]] = {}
        for run_id, blob in cursor.fetchall():
            by_run.setdefault(run_id, []).append(np.frombuffer(blob, dtype="<i8"))
        for run_id, parts in by_run.items():
            keys = np.sort(np.concatenate(parts))
            cursor.execute(
                f"INSERT INTO {big} (run_id, id_hash) SELECT %s, value FROM json_each(%s)",
                [run_id, orjson.dumps(keys, option=orjson.OPT_SERIALIZE_NUMPY).decode()],
            )
        cursor.execute(f"DELETE FROM {recent}")


def store_columns(run: Run, cols: EventColumns) -> IngestResult:
    """Store validated columns as one ``EventBlock``; events whose id the run already has are
    counted as duplicates, not stored. Matrices and the block index are updated in the same
    transaction."""
    result = IngestResult(lines=len(cols))
    if not len(cols):
        return result
    with transaction.atomic():
        fresh = _fresh_mask(run, id_hashes(cols.event_id))
        result.stored = int(fresh.sum())
        result.duplicates = len(cols) - result.stored
        if not result.stored:
            return result
        _hold_run(run)
        new = cols if result.duplicates == 0 else cols.select(fresh)
        keys, inverse = _group_keys(new)
        block_id = blocks.insert_block(run, new, keys, np.bincount(inverse, minlength=len(keys)))
        if connection.vendor != "postgresql" and block_id % KEY_MERGE_BLOCKS == 0:
            _merge_recent_keys()
        matrices.add_events(run, new, keys, inverse)
    return result


def _hold_run(run: Run) -> None:
    """The run row exists, and (PostgreSQL) stays until this transaction ends: the blocks, key
    index and matrices have no database foreign key (``models.EventBlock.run``), so this one
    check per batch is what their ~250 deferred per-row checks did. ``FOR KEY SHARE`` is the lock
    such a check takes: it blocks a delete of the run, not its updates or other batches. (SQLite:
    the write transaction is ``BEGIN IMMEDIATE``, so no delete can come between.)"""
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


def forget_event_ids(run: Run, ids: list[str], chunk: int = 5000) -> int:
    """Let the idempotency keys of deleted events go (retention): a re-post of such an old event
    would be stored again, which is what retention means. Returns how many keys were deleted."""
    if not ids:
        return 0
    hashes = np.unique(id_hashes(ids))
    big = connection.ops.quote_name(EventKey._meta.db_table)
    gone = 0
    with connection.cursor() as cursor:  # not a hot path: Django's own cursor (it has rowcount)
        for at in range(0, len(hashes), chunk):
            part = hashes[at : at + chunk].tolist()
            places = ", ".join(["%s"] * len(part))
            cursor.execute(f"DELETE FROM {big} WHERE run_id = %s AND id_hash IN ({places})", [run.pk, *part])
            gone += max(cursor.rowcount, 0)
    recent = RecentKeyBatch.objects.filter(run=run)
    for row in recent:  # at most a few dozen rows; rewrite those holding a deleted key
        keys = np.frombuffer(bytes(row.hashes), dtype="<i8")
        keep = keys[~np.isin(keys, hashes)]
        if len(keep) == len(keys):
            continue
        gone += len(keys) - len(keep)
        if len(keep):
            RecentKeyBatch.objects.filter(pk=row.pk).update(hashes=keep.astype("<i8").tobytes())
        else:  # a claim's binary search needs at least one key per blob
            RecentKeyBatch.objects.filter(pk=row.pk).delete()
    return gone
