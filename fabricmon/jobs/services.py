"""The verbs of the jobs app: create and tag runs, store rank maps, ingest phase events (NDJSON
batches or importer output) and keep the per-(step, layer, phase) traffic matrices current.

Ingest speed matters (millions of events per run): a batch is validated in pure Python
(``validation``), written with a single ``executemany`` ``INSERT … ON CONFLICT DO NOTHING``, and
the matrices are updated once per (source, step, layer, phase) touched by the batch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
from django.db import connection, transaction
from django.utils import timezone

from fabricmon.jobs.models import PhaseEvent, RankMapEntry, Run, TraceUpload, TrafficMatrix
from fabricmon.jobs.validation import ROW_FIELDS, LineError, ParsedBatch, parse_ndjson, validate_dicts

MAX_TAGS, MAX_TAG_LEN = 64, 100
NO_VALUE = -1  # a matrix's step/layer when the events had none (a real value keeps the unique key working)
IMPORT_BATCH = 5_000


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


# --- events -------------------------------------------------------------------------------------


def _insert_sql() -> str:
    table = connection.ops.quote_name(PhaseEvent._meta.db_table)
    cols = ", ".join(connection.ops.quote_name(c) for c in ("run_id", *ROW_FIELDS))
    marks = ", ".join(["%s"] * (len(ROW_FIELDS) + 1))
    return f"INSERT INTO {table} ({cols}) VALUES ({marks}) ON CONFLICT (run_id, event_id) DO NOTHING"


def store_batch(run: Run, batch: ParsedBatch) -> IngestResult:
    """Insert a validated batch; events whose id the run already has are counted, not stored."""
    result = IngestResult(lines=batch.lines, rejected=list(batch.errors))
    if not batch.rows:
        return result
    with transaction.atomic():
        ids = [row[0] for row in batch.rows]
        existing = (
            set(PhaseEvent.objects.filter(run=run, event_id__in=ids).values_list("event_id", flat=True))
            if len(ids) <= 5_000
            else _existing_ids_chunked(run, ids)
        )
        fresh_rows, fresh_peers, seen = [], [], existing
        for row, peers in zip(batch.rows, batch.peers, strict=True):
            if row[0] in seen:
                result.duplicates += 1
                continue
            seen.add(row[0])
            fresh_rows.append((run.pk, *row))
            fresh_peers.append((row, peers))
        if fresh_rows:
            with connection.cursor() as cursor:
                cursor.executemany(_insert_sql(), fresh_rows)
            _add_to_matrices(run, fresh_peers)
        result.stored = len(fresh_rows)
    return result


def _existing_ids_chunked(run: Run, ids: list[str]) -> set[str]:
    found: set[str] = set()
    for i in range(0, len(ids), 5_000):
        found.update(
            PhaseEvent.objects.filter(run=run, event_id__in=ids[i : i + 5_000]).values_list(
                "event_id", flat=True
            )
        )
    return found


_R = {f: i for i, f in enumerate(ROW_FIELDS)}


def _add_to_matrices(run: Run, rows: list[tuple[tuple[Any, ...], tuple[Any, Any]]]) -> None:
    """Fold the per-peer maps of new events into their (source, step, layer, phase) matrices:
    one SELECT for all touched matrices, one numpy scatter-add for the whole batch, then one
    executemany UPDATE and one INSERT."""
    key_index: dict[tuple[Any, ...], int] = {}
    calls: dict[tuple[Any, ...], int] = defaultdict(int)
    # flat (matrix, src, dst, bytes) columns for sent (kind 0) and received (kind 1)
    cols: tuple[list[int], ...] = ([], [], [], [], [])
    i_src, i_step, i_layer, i_phase, i_rank = _R["source"], _R["step"], _R["layer"], _R["phase"], _R["rank"]
    for row, (send_map, recv_map) in rows:
        if not send_map and not recv_map:
            continue
        step, layer = row[i_step], row[i_layer]
        key = (
            row[i_src],
            NO_VALUE if step is None else step,
            NO_VALUE if layer is None else layer,
            row[i_phase],
        )
        kid = key_index.setdefault(key, len(key_index))
        calls[key] += 1
        rank = row[i_rank]
        for kind, peer_map in ((0, send_map), (1, recv_map)):
            if peer_map:
                n_peers = len(peer_map)
                cols[0].extend([kid] * n_peers)
                cols[1].extend([kind] * n_peers)
                peers = list(map(int, peer_map))
                if kind == 0:
                    cols[2].extend([rank] * n_peers)
                    cols[3].extend(peers)
                else:
                    cols[2].extend(peers)
                    cols[3].extend([rank] * n_peers)
                cols[4].extend(peer_map.values())
    if not calls:
        return
    table = connection.ops.quote_name(TrafficMatrix._meta.db_table)
    steps = [k[1] for k in calls]
    sources = sorted({k[0] for k in calls})
    kid_a, kind_a, src_a, dst_a, bytes_a = (np.asarray(c, dtype=np.int64) for c in cols)
    n_batch = int(max(src_a.max(), dst_a.max())) + 1
    # one stable sort groups the batch by matrix; each group is one scatter-add (no n_keysxnxn block)
    order = np.argsort(kid_a, kind="stable")
    bounds = np.searchsorted(kid_a[order], np.arange(len(key_index) + 1))

    def batch_part(kid: int) -> tuple[np.ndarray, np.ndarray]:
        sel = order[bounds[kid] : bounds[kid + 1]]
        part = np.zeros((2, n_batch, n_batch), dtype=np.int64)
        np.add.at(part, (kind_a[sel], src_a[sel], dst_a[sel]), bytes_a[sel])
        return part[0], part[1]

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, source, step, layer, phase, n_ranks, sent, received, calls FROM {table} "
            f"WHERE run_id = %s AND step >= %s AND step <= %s "
            f"AND source IN ({', '.join(['%s'] * len(sources))})",
            [run.pk, min(steps), max(steps), *sources],
        )
        existing = {
            (r[1], r[2], r[3], r[4]): r for r in cursor.fetchall() if (r[1], r[2], r[3], r[4]) in calls
        }
        updates, inserts = [], []
        for key, kid in key_index.items():
            old = existing.get(key)
            part_sent, part_recv = batch_part(kid)
            if old is None:
                n = n_batch
                m_sent, m_recv = part_sent, part_recv
            else:
                n_old = old[5]
                n = max(n_old, n_batch)
                m_sent = _grown(np.frombuffer(bytes(old[6]), dtype="<i8").reshape(n_old, n_old), n)
                m_recv = _grown(np.frombuffer(bytes(old[7]), dtype="<i8").reshape(n_old, n_old), n)
                m_sent[:n_batch, :n_batch] += part_sent
                m_recv[:n_batch, :n_batch] += part_recv
            sent_blob, recv_blob = m_sent.astype("<i8").tobytes(), m_recv.astype("<i8").tobytes()
            if old is None:
                inserts.append((run.pk, *key, n, sent_blob, recv_blob, calls[key]))
            else:
                updates.append((n, sent_blob, recv_blob, old[8] + calls[key], old[0]))
        if updates:
            cursor.executemany(
                f"UPDATE {table} SET n_ranks = %s, sent = %s, received = %s, calls = %s WHERE id = %s",
                updates,
            )
        if inserts:
            cursor.executemany(
                f"INSERT INTO {table} (run_id, source, step, layer, phase, n_ranks, sent, received, calls) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                inserts,
            )


def _grown(a: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n, n), dtype="<i8")
    out[: a.shape[0], : a.shape[1]] = a
    return out


def ingest_ndjson(run: Run, body: bytes, clock_offset_ns: int = 0, max_lines: int = 100_000) -> IngestResult:
    """Validate and store one NDJSON batch: valid lines are kept, bad ones reported by number."""
    return store_batch(run, parse_ndjson(body, clock_offset_ns, max_lines))


def ingest_events(run: Run, events: Iterable[dict[str, Any]], batch_size: int = IMPORT_BATCH) -> IngestResult:
    """Store a stream of decoded events (importers) in bounded batches."""
    total = IngestResult()
    chunk: list[dict[str, Any]] = []
    for event in events:
        chunk.append(event)
        if len(chunk) >= batch_size:
            total.add(store_batch(run, validate_dicts(chunk)), total.lines)
            chunk = []
    if chunk:
        total.add(store_batch(run, validate_dicts(chunk)), total.lines)
    return total


# --- trace files --------------------------------------------------------------------------------

IMPORT_KINDS = ("kineto", "fr", "fr_pickle", "inspector")


def import_trace(
    run: Run,
    kind: str,
    stream: IO[bytes],
    *,
    filename: str = "",
    rank: int | None = None,
    size_bytes: int = 0,
) -> tuple[TraceUpload, IngestResult]:
    """Import a trace file (streamed) into ``run``; format errors become an ``InputError``."""
    from collectors.traces import TraceFormatError, read_events  # importers are pure, no Django  # noqa: PLC0415

    if kind not in IMPORT_KINDS:
        raise InputError("kind", f"unknown trace kind {kind!r}; expected one of {', '.join(IMPORT_KINDS)}")
    upload = TraceUpload.objects.create(run=run, kind=kind, filename=filename[:255], size_bytes=size_bytes)
    try:
        result = ingest_events(run, read_events(kind, stream, rank=rank))
    except TraceFormatError as exc:
        upload.error = str(exc)
        upload.save(update_fields=["error"])
        raise InputError("file", str(exc)) from exc
    upload.events_stored, upload.events_rejected = result.stored, len(result.rejected)
    upload.error = "; ".join(f"event {e.line}: {e.field}: {e.reason}" for e in result.rejected[:5])
    upload.save(update_fields=["events_stored", "events_rejected", "error"])
    return upload, result


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
