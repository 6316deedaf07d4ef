"""The verbs of the jobs app: create and tag runs, store rank maps, ingest phase events (NDJSON
batches or importer output) and keep the per-(step, layer, phase) traffic matrices current.

Ingest speed matters (millions of events per run, ≥ 50,000 events/s per core): a batch is parsed
into numpy columns (``ndjson``), its event ids are claimed as 64-bit hashes (PostgreSQL:
``INSERT … ON CONFLICT DO NOTHING RETURNING``; SQLite: a read-only lookup in the big key table and
one sorted blob per batch in front of it, merged in bulk — see ``models.RecentKeyBatch``), the new
events are stored as one compact ``EventBlock`` row, and the matrices are updated once per
(source, step, layer, phase) touched, from one vectorized scatter-add.
Reading: ``iter_events`` (dicts), ``event_columns`` (numpy).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from django.db import connection, transaction
from django.db.models import Sum
from django.utils import timezone

from collectors.traces.schema import PHASES, SOURCES
from fabricmon.jobs.columns import (
    EventColumns,
    columns_from_rows,
    concat,
    decode_block,
    empty_columns,
    encode_block,
    id_hashes,
    iter_dicts,
)
from fabricmon.jobs.models import (
    EventBlock,
    EventBlockKey,
    EventKey,
    RankMapEntry,
    RecentKeyBatch,
    Run,
    TrafficMatrix,
)
from fabricmon.jobs.ndjson import parse_ndjson_columns
from fabricmon.jobs.validation import MAX_OFFSET_NS, LineError, ParsedBatch, validate_dicts

MAX_TAGS, MAX_TAG_LEN = 64, 100
NO_VALUE = -1  # a matrix's step/layer when the events had none (a real value keeps the unique key working)
IMPORT_BATCH = 5_000
DENSE_MATRIX_CELLS = 8_000_000  # a batch's matrices are summed in one dense array up to this size


class InputError(ValueError):
    """Bad input from a caller: ``field`` names what is wrong (shown in the 4xx answer)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field, self.reason = field, reason


@dataclass
class IngestResult:
    """What happened to one batch: counts and each rejected line."""

    lines: int = 0
    stored: int = 0
    duplicates: int = 0
    rejected: list[LineError] = field(default_factory=list)

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
        }

    def add(self, other: IngestResult, line_offset: int = 0) -> None:
        self.lines += other.lines
        self.stored += other.stored
        self.duplicates += other.duplicates
        self.rejected.extend(LineError(e.line + line_offset, e.field, e.reason) for e in other.rejected)


# --- runs ---------------------------------------------------------------------------------------


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


# --- events ---------------------------------------------------------------------------------------


def store_batch(run: Run, batch: ParsedBatch) -> IngestResult:
    """Store a batch validated row by row (importers); see ``store_columns``."""
    result = store_columns(run, columns_from_rows(batch.rows, batch.peers))
    result.lines, result.rejected = batch.lines, list(batch.errors)
    return result


def _fresh_mask(run: Run, hashes: np.ndarray) -> np.ndarray:
    """Claim each event's id hash for the run; true where the claim is new. The database decides
    (so concurrent posts of one batch store it once), and a repeat inside the batch keeps its
    first occurrence. Keys go in sorted (``np.unique``'s order): neighbouring inserts land on the
    same B-tree pages."""
    todo, first = np.unique(hashes, return_index=True)
    table = connection.ops.quote_name(EventKey._meta.db_table)
    run_id = int(run.pk)
    if connection.vendor == "postgresql":  # one array parameter: no 1,000-row VALUES list to parse
        with _pg_cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (run_id, id_hash) SELECT %s, unnest(%b::bigint[]) "
                "ON CONFLICT DO NOTHING RETURNING id_hash",
                [run_id, todo.tolist()],
            )
            won = np.sort(np.array([r[0] for r in cursor.fetchall()], dtype=np.int64))
    else:
        won = _claim_sqlite(run_id, todo)
    fresh = np.zeros(len(hashes), dtype=bool)
    if len(won) == len(todo):  # the common case: every claim is new
        fresh[first] = True
    elif len(won):  # both sorted: place the won hashes by binary search
        fresh[first[np.searchsorted(todo, won)]] = True
    return fresh


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
    with _QmarkCursor() as cursor:
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
    with _QmarkCursor() as cursor:
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
        new = cols if result.duplicates == 0 else cols.select(fresh)
        block_id = _insert_block(run, new)
        if connection.vendor != "postgresql" and block_id % KEY_MERGE_BLOCKS == 0:
            _merge_recent_keys()
        keys, inverse = _group_keys(new)
        counts = np.bincount(inverse, minlength=len(keys))
        with _cursor() as cursor:  # raw: the ORM costs ~50 µs per object here
            run_id = run.pk
            _insert_many(
                cursor,
                connection.ops.quote_name(EventBlockKey._meta.db_table),
                ("run_id", "block_id", "source", "step", "layer", "phase", "events"),
                [(run_id, block_id, *k, c) for k, c in zip(keys, counts.tolist(), strict=True)],
            )
        _add_to_matrices(run, new, keys, inverse)
    return result


def _insert_block(run: Run, cols: EventColumns) -> int:
    """One ``EventBlock`` row, raw (the ORM's create costs ~0.5 µs an event here)."""
    blob = encode_block(cols)
    start_min, start_max = int(cols.start_ns.min()), int(cols.start_ns.max())
    sql = (
        f"INSERT INTO {connection.ops.quote_name(EventBlock._meta.db_table)} "
        "(run_id, n_events, start_ns_min, start_ns_max, columns, created_at) "
        "VALUES (%s, %s, %s, %s, %s, %s) RETURNING id"
    )
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    # PostgreSQL: the blob as a binary parameter, not 200 KB of quoted hex
    with _pg_cursor() if connection.vendor == "postgresql" else _QmarkCursor() as cursor:
        cursor.execute(sql, [run.pk, len(cols), start_min, start_max, blob, now])
        return int(cursor.fetchone()[0])


def _pg_cursor() -> Any:
    """A server-side-binding psycopg cursor on Django's connection (same transaction): arrays and
    bytea travel as binary parameters instead of quoted literals (Django's cursors quote)."""
    import psycopg  # noqa: PLC0415  (PostgreSQL only)

    connection.ensure_connection()
    return psycopg.Cursor(connection.connection)


class _QmarkCursor:
    """SQLite: the driver's own cursor on Django's connection (same transaction), ``%s`` turned
    into ``?`` with str.replace. Django's cursor wrapper runs a regex over every statement and
    copies its parameters (~0.3 µs an event on the ingest path, for 1,000-placeholder statements)."""

    def __init__(self) -> None:
        connection.ensure_connection()
        self.cursor = connection.connection.cursor()

    def __enter__(self) -> _QmarkCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cursor.close()

    def execute(self, sql: str, params: Any = ()) -> _QmarkCursor:
        self.cursor.execute(sql.replace("%s", "?"), params)
        return self

    def fetchall(self) -> list[Any]:
        return self.cursor.fetchall()

    def fetchone(self) -> Any:
        return self.cursor.fetchone()


def _cursor() -> Any:
    """A cursor for the ingest path's own SQL (``%s`` parameters) on either database."""
    return connection.cursor() if connection.vendor == "postgresql" else _QmarkCursor()


# PostgreSQL types of the columns written with unnest(array, …)
_PG_TYPES = {
    "run_id": "bigint",
    "block_id": "bigint",
    "source": "text",
    "step": "bigint",
    "layer": "integer",
    "phase": "text",
    "events": "integer",
    "n_ranks": "integer",
    "sent": "bytea",
    "received": "bytea",
    "calls": "integer",
    "id": "bigint",
}


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


def _add_to_matrices(
    run: Run, cols: EventColumns, keys: list[tuple[str, int, int, str]], inverse: np.ndarray
) -> None:
    """Fold the new events' per-peer bytes into their (source, step, layer, phase) matrices: one
    bincount for the whole batch, one SELECT of the touched matrices, one multi-row statement each for
    UPDATE and INSERT. (Sender rows come from ``send`` maps, receiver columns from ``recv``.)"""
    s_ev, r_ev = cols.peer_event_index("send"), cols.peer_event_index("recv")
    if not len(s_ev) and not len(r_ev):
        return
    kid = np.concatenate([inverse[s_ev], inverse[r_ev]])
    kind = np.concatenate([np.zeros(len(s_ev), np.int64), np.ones(len(r_ev), np.int64)])
    src = np.concatenate([cols.rank[s_ev], cols.recv_peer])
    dst = np.concatenate([cols.send_peer, cols.rank[r_ev]])
    nbytes = np.concatenate([cols.send_bytes, cols.recv_bytes])
    n = int(max(src.max(), dst.max())) + 1
    has_peers = np.zeros(len(keys), dtype=bool)
    has_peers[kid] = True
    calls = np.bincount(inverse[(cols.send_n > 0) | (cols.recv_n > 0)], minlength=len(keys))
    touched = np.flatnonzero(has_peers)
    # dense (touched, 2, n, n) when small; otherwise per-key from one sort
    local = np.full(len(keys), -1, dtype=np.int64)
    local[touched] = np.arange(len(touched))
    flat_index = ((local[kid] * 2 + kind) * n + src) * n + dst
    if len(touched) * 2 * n * n <= DENSE_MATRIX_CELLS:
        # (bincount's weights are float64: add.at keeps the int64 byte counts exact)
        dense = np.zeros(len(touched) * 2 * n * n, dtype=np.int64)
        np.add.at(dense, flat_index, nbytes)
        parts = dense.reshape(len(touched), 2, n, n)
        raw = parts.astype("<i8", copy=False).tobytes()  # every new matrix's blobs: slices of one buffer
        size = n * n * 8

        def part(j: int) -> tuple[np.ndarray, np.ndarray]:
            return parts[j, 0], parts[j, 1]

        def blobs(j: int) -> tuple[bytes, bytes]:
            return raw[2 * j * size : (2 * j + 1) * size], raw[(2 * j + 1) * size : (2 * j + 2) * size]
    else:
        order = np.argsort(flat_index, kind="stable")
        owner = local[kid][order]
        bounds = np.searchsorted(owner, np.arange(len(touched) + 1))

        def part(j: int) -> tuple[np.ndarray, np.ndarray]:
            sel = order[bounds[j] : bounds[j + 1]]
            m = np.zeros((2, n, n), dtype=np.int64)
            np.add.at(m, (kind[sel], src[sel], dst[sel]), nbytes[sel])
            return m[0], m[1]

        def blobs(j: int) -> tuple[bytes, bytes]:
            sent, received = part(j)
            return sent.astype("<i8").tobytes(), received.astype("<i8").tobytes()

    table = connection.ops.quote_name(TrafficMatrix._meta.db_table)
    run_id = run.pk
    wanted = [keys[k] for k in touched.tolist()]
    steps = [k[1] for k in wanted]
    sources = sorted({k[0] for k in wanted})
    with _cursor() as cursor:
        cursor.execute(
            f"SELECT id, source, step, layer, phase, n_ranks, sent, received, calls FROM {table} "
            f"WHERE run_id = %s AND step >= %s AND step <= %s "
            f"AND source IN ({', '.join(['%s'] * len(sources))})",
            [run.pk, min(steps), max(steps), *sources],
        )
        wanted_set = set(wanted)
        existing = {
            (r[1], r[2], r[3], r[4]): r for r in cursor.fetchall() if (r[1], r[2], r[3], r[4]) in wanted_set
        }
        updates, inserts = [], []
        calls_list = calls.tolist()
        for j, k in enumerate(touched.tolist()):
            key = keys[k]
            old = existing.get(key)
            if old is None:
                inserts.append((run_id, *key, n, *blobs(j), calls_list[k]))
                continue
            part_sent, part_recv = part(j)
            n_old = old[5]
            m = max(n_old, n)
            m_sent = _grown(np.frombuffer(bytes(old[6]), dtype="<i8").reshape(n_old, n_old), m)
            m_recv = _grown(np.frombuffer(bytes(old[7]), dtype="<i8").reshape(n_old, n_old), m)
            m_sent[:n, :n] += part_sent
            m_recv[:n, :n] += part_recv
            updates.append((m, m_sent.tobytes(), m_recv.tobytes(), old[8] + calls_list[k], old[0]))
        if updates and connection.vendor == "postgresql":
            cols_ = ("n_ranks", "sent", "received", "calls", "id")
            with _pg_cursor() as pg:
                pg.execute(
                    f"UPDATE {table} SET n_ranks = v.n_ranks, sent = v.sent, received = v.received, "
                    f"calls = v.calls FROM unnest({', '.join(f'%b::{_PG_TYPES[c]}[]' for c in cols_)}) "
                    f"AS v({', '.join(cols_)}) WHERE {table}.id = v.id",
                    [list(col) for col in zip(*updates, strict=True)],
                )
            updates = []
        for rows in _chunks(updates):  # one statement per chunk: per-row statements cost ~50 µs on PG
            cursor.execute(
                f"UPDATE {table} SET n_ranks = v.column1, sent = v.column2, received = v.column3, "
                f"calls = v.column4 FROM (VALUES {_marks(len(rows), 5)}) AS v WHERE {table}.id = v.column5",
                [x for row in rows for x in row],
            )
        _insert_many(
            cursor,
            table,
            ("run_id", "source", "step", "layer", "phase", "n_ranks", "sent", "received", "calls"),
            inserts,
        )


def _chunks(rows: list[tuple[Any, ...]], size: int = 500) -> Iterator[list[tuple[Any, ...]]]:
    for i in range(0, len(rows), size):
        yield rows[i : i + size]


def _marks(n_rows: int, n_cols: int) -> str:
    row = "(" + ", ".join(["%s"] * n_cols) + ")"
    return ", ".join([row] * n_rows)


def _insert_many(cursor: Any, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """Multi-row INSERT: on PostgreSQL one ``unnest`` of one array per column (``%b``: arrays
    dumped in binary — the text dumper regex-checks and escapes every element); on SQLite a
    VALUES list of 500 rows a statement through the driver's cursor (executemany is a statement
    per row; a JSON parameter read by json_each measured ~0.7 µs a row slower for these rows)."""
    if not rows:
        return
    if connection.vendor == "postgresql":
        arrays = ", ".join(f"%b::{_PG_TYPES[c]}[]" for c in columns)
        with _pg_cursor() as pg:
            pg.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) SELECT * FROM unnest({arrays})",
                [list(col) for col in zip(*rows, strict=True)],
            )
        return
    for part in _chunks(rows):
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES {_marks(len(part), len(columns))}",
            [x for row in part for x in row],
        )


def _grown(a: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n, n), dtype="<i8")
    out[: a.shape[0], : a.shape[1]] = a
    return out


# --- reading events ------------------------------------------------------------------------------


def _block_filter(run: Run, **where: Any) -> Any:
    """Blocks of the run holding events that match ``where`` (source/step/layer/phase), by time."""
    blocks = EventBlock.objects.filter(run=run)
    where = {k: v for k, v in where.items() if v is not None}
    if where:
        blocks = blocks.filter(pk__in=EventBlockKey.objects.filter(run=run, **where).values("block_id"))
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
    for blob in _block_filter(run, **where).values_list("columns", flat=True).iterator(chunk_size=64):
        cols = decode_block(blob)
        parts.append(cols.select(_mask(cols, where)))
    cols = concat(parts)
    order = np.argsort(cols.start_ns, kind="stable")
    return cols if len(cols) < 2 or (order == np.arange(len(cols))).all() else cols.take(order)


def iter_events(run: Run, *, source: str | None = None, phase: str | None = None) -> Iterator[dict[str, Any]]:
    """The run's events as dicts (``columns.EXPORT_FIELDS`` + per-peer maps) in start_ns order
    (ties in arrival order), streamed: blocks are read in start order and merged, so memory holds
    only the blocks whose times overlap."""
    where = {"source": source, "phase": phase}
    blocks = _block_filter(run, **where).values_list("start_ns_min", "columns")
    pending = empty_columns()
    for start_min, blob in blocks.iterator(chunk_size=16):
        ready = pending.start_ns < start_min  # nothing later can start before this block does
        if ready.any():
            yield from _sorted_dicts(pending.select(ready))
            pending = pending.select(~ready)
        cols = decode_block(blob)
        pending = concat([pending, cols.select(_mask(cols, where))])
    yield from _sorted_dicts(pending)


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
        ids.extend(decode_block(blob).event_id)
    return ids


def ingest_ndjson(run: Run, body: bytes, clock_offset_ns: int = 0, max_lines: int = 100_000) -> IngestResult:
    """Validate and store one NDJSON batch: valid lines are kept, bad ones reported by number."""
    if not -MAX_OFFSET_NS <= clock_offset_ns <= MAX_OFFSET_NS:
        raise InputError("X-Clock-Offset-Ns", f"must be within ±{MAX_OFFSET_NS} ns")
    cols, errors, lines = parse_ndjson_columns(body, clock_offset_ns, max_lines)
    result = store_columns(run, cols)
    result.lines, result.rejected = lines, errors
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
    for event in events:
        chunk.append(event)
        if len(chunk) >= batch_size:
            total.add(store_batch(run, validate_dicts(chunk)), total.lines)
            chunk = []
            if on_batch is not None:
                on_batch(total)
    if chunk:
        total.add(store_batch(run, validate_dicts(chunk)), total.lines)
    return total


def sum_matrices(matrices: list[TrafficMatrix]) -> tuple[list[list[int]], list[list[int]]]:
    """Element-wise sum of several matrices (e.g. all steps of one layer and phase) as lists."""
    if not matrices:
        return [], []
    n = max(m.n_ranks for m in matrices)
    sent, received = np.zeros((n, n), dtype=np.int64), np.zeros((n, n), dtype=np.int64)
    for m in matrices:
        sent += _grown(m.sent_array(), n)
        received += _grown(m.received_array(), n)
    return sent.tolist(), received.tolist()
