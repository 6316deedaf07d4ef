"""Trace file imports (Kineto, Flight Recorder, NCCL Inspector) into a run, with progress.

A whole job — a folder (CLI) or a tar/zip archive of one trace per rank — is one upload with one
report (``import_members``). Two ways in: ``import_trace`` reads a stream now, in the caller's
process (the CLI, small uploads); ``queue_import`` saves an upload under
``FABRICMON_UPLOAD_DIR`` and queues the Celery task ``jobs.import_upload``, whose worker calls
``import_queued``. Either way ``run_import`` keeps the ``TraceUpload`` row current — state, bytes
read of size, files done, events stored/duplicate/rejected, the import report — so the API
and the run page can show progress. Events go through ``services.ingest_events``:
idempotent by id, so importing a file twice (or re-running a dead worker's import) is safe.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from collectors.traces import ImportReport, TraceFormatError, bundles, read_events
from collectors.traces.ranks import rank_from_name
from fabricmon.base import sockets
from fabricmon.jobs.ingest import IngestResult, ingest_events
from fabricmon.jobs.models import Run, TraceUpload
from fabricmon.jobs.validation import InputError

IMPORT_KINDS = ("kineto", "fr", "fr_pickle", "inspector")
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")
PROGRESS_EVERY_S = 0.5  # an import writes its progress to its TraceUpload row at most this often
STALE_IMPORT_S = 300  # a "running" import not heard of for this long is taken over (worker died)


class _ProgressReader:
    """A binary file that reports how far into it reading got (``tell()``, so re-reads after a
    seek are not counted twice) at most every ``PROGRESS_EVERY_S`` seconds."""

    def __init__(self, raw: IO[bytes], report: Callable[[int], None]) -> None:
        self.raw, self.report, self._last = raw, report, time.monotonic()

    def _tick(self) -> None:
        now = time.monotonic()
        if now - self._last >= PROGRESS_EVERY_S:
            self._last = now
            self.report(self.raw.tell())

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self._tick()
        return data

    def readinto(self, buffer: Any) -> int:
        n = self.raw.readinto(buffer)  # type: ignore[attr-defined]
        self._tick()
        return int(n or 0)

    def readline(self, size: int = -1) -> bytes:
        line = self.raw.readline(size)
        self._tick()
        return line

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.readline, b"")

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True


def _check_import(kind: str, rank: int | None, filename: str = "") -> None:
    if kind not in IMPORT_KINDS:
        raise InputError("kind", f"unknown trace kind {kind!r}; expected one of {', '.join(IMPORT_KINDS)}")
    named = rank_from_name(filename) is not None or filename.endswith(ARCHIVE_SUFFIXES)
    if kind in ("fr", "fr_pickle") and rank is None and not named:
        raise InputError("rank", "Flight Recorder dumps do not name their rank: give rank")


def import_trace(
    run: Run,
    kind: str,
    stream: IO[bytes],
    *,
    filename: str = "",
    rank: int | None = None,
    size_bytes: int = 0,
) -> tuple[TraceUpload, IngestResult]:
    """Import a trace file (streamed) into ``run`` now, in this process (CLI, small uploads);
    format errors become an ``InputError``. Progress is written to the upload row as it goes."""
    _check_import(kind, rank, filename)
    upload = TraceUpload.objects.create(
        run=run,
        kind=kind,
        filename=filename[:255],
        rank=rank,
        size_bytes=size_bytes,
        state=TraceUpload.State.RUNNING,
    )
    return upload, run_import(upload, stream)


def run_import(
    upload: TraceUpload, stream: IO[bytes], before_done: Callable[[], None] | None = None
) -> IngestResult:
    """Read ``stream`` as ``upload.kind`` into the upload's run, keeping the upload row current
    (bytes read, files, counts, the import report, state). A folder's or archive's traces (one
    per rank) are imported one after another into one report. A format error marks the upload
    failed and raises ``InputError``. ``before_done`` runs after the last event is stored and
    before the row says done (the queued path deletes its file there: whoever sees "done" sees
    the cleanup finished too)."""
    pk = upload.pk
    report = ImportReport(kind=upload.kind)

    def save(**values: Any) -> None:  # an UPDATE of the given columns only (no read-modify-write)
        TraceUpload.objects.filter(pk=pk).update(updated_at=timezone.now(), **values)
        for key, value in values.items():
            setattr(upload, key, value)

    reader = _ProgressReader(stream, lambda pos: save(bytes_read=pos))
    try:
        if bundles.is_bundle(reader):
            members: Iterable[bundles.Member] = bundles.open_bundle(reader, upload.filename or "archive")
            result = import_members(upload, members, report, save)
        else:
            read = read_events(upload.kind, reader, rank=upload.rank, name=upload.filename, report=report)
            events = _within_world(upload.run, read)
            result = ingest_events(upload.run, events, on_batch=lambda total: save(**_counts(total)))
    except TraceFormatError as exc:
        save(state=TraceUpload.State.FAILED, error=str(exc)[:20_000], report=report.as_dict(),
             finished_at=timezone.now())
        raise InputError("file", str(exc)) from exc
    except Exception as exc:
        save(state=TraceUpload.State.FAILED, error=f"import failed: {exc}", finished_at=timezone.now())
        raise
    result.report = report.as_dict()
    if before_done is not None:
        before_done()
    save(
        state=TraceUpload.State.DONE,
        bytes_read=upload.size_bytes or reader.tell(),
        error="; ".join(f"event {e.line}: {e.field}: {e.reason}" for e in result.rejected[:5]),
        report=result.report,
        finished_at=timezone.now(),
        **_counts(result),
    )
    if result.stored:
        sockets.run_changed(upload.run_id)
    return result


def _within_world(run: Run, events: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """A trace of a rank the run does not have is refused whole (a file of another job, or a
    rank given wrong) rather than stored beside the run's ranks."""
    world = run.world_size
    for event in events:
        if world and not 0 <= event["rank"] < world:
            raise TraceFormatError(f"rank {event['rank']} is outside the run's world size {world}")
        yield event


def _counts(result: IngestResult) -> dict[str, Any]:
    return {
        "events_stored": result.stored,
        "events_duplicate": result.duplicates,
        "events_rejected": len(result.rejected),
    }


def import_members(
    upload: TraceUpload, members: Iterable[bundles.Member], report: ImportReport, save: Callable[..., None]
) -> IngestResult:
    """Import each trace of a job (rank from the trace, else its name) into one result and one
    report; a file that cannot be read is listed in the report and the others still imported.
    None readable at all is an error."""
    total = IngestResult()
    failed: list[str] = []
    done = 0
    for name, member in members:
        mine = ImportReport(kind=upload.kind)
        try:
            read = read_events(upload.kind, member, rank=None, name=name, report=mine)
            events = _within_world(upload.run, read)
            part = ingest_events(upload.run, events, on_batch=lambda t: save(**_counts(t)))
        except TraceFormatError as exc:
            failed.append(name)
            mine.unusable[f"file {name}: {str(exc).splitlines()[0][:300]}"] += 1
            mine.files.append({"file": name, "error": str(exc).splitlines()[0][:300]})
            part = IngestResult()
        total.add(part, total.lines)
        report.merge(mine)
        done += 1
        save(files_done=done, files_total=done, report=report.as_dict(), **_counts(total))
    if done == 0:
        raise TraceFormatError(f"{upload.filename or 'archive'}: no trace files in it")
    if total.lines == 0:
        raise TraceFormatError(
            f"{upload.filename or 'archive'}: none of its {done} files gave an event\n"
            + "\n".join(report.lines())
        )
    return total


def import_folder(run: Run, kind: str, folder: Path) -> tuple[TraceUpload, IngestResult]:
    """The CLI's whole-job import: every trace under ``folder`` into ``run``, one upload row."""
    _check_import(kind, 0)
    files = [p for p in folder.rglob("*") if p.is_file()]
    upload = TraceUpload.objects.create(
        run=run, kind=kind, filename=folder.name[:255], size_bytes=sum(p.stat().st_size for p in files),
        state=TraceUpload.State.RUNNING,
    )
    report = ImportReport(kind=kind)

    def save(**values: Any) -> None:
        TraceUpload.objects.filter(pk=upload.pk).update(updated_at=timezone.now(), **values)
        for key, value in values.items():
            setattr(upload, key, value)

    try:
        result = import_members(upload, bundles.folder_members(folder), report, save)
    except TraceFormatError as exc:
        save(state=TraceUpload.State.FAILED, error=str(exc)[:20_000], report=report.as_dict(),
             finished_at=timezone.now())
        raise InputError("file", str(exc)) from exc
    result.report = report.as_dict()
    save(state=TraceUpload.State.DONE, bytes_read=upload.size_bytes, report=result.report,
         finished_at=timezone.now(), **_counts(result))
    if result.stored:
        sockets.run_changed(run.pk)
    return upload, result


def queue_import(
    run: Run,
    kind: str,
    upload_file: Any,
    *,
    filename: str = "",
    rank: int | None = None,
    size_bytes: int = 0,
    enqueue: Callable[[int], None],
) -> TraceUpload:
    """Save an uploaded file under ``FABRICMON_UPLOAD_DIR`` and queue its import with ``enqueue``
    (the upload's id; ``tasks.enqueue_import`` queues the Celery task ``jobs.import_upload``) after
    this transaction commits; the upload row shows its progress."""
    _check_import(kind, rank, filename)
    folder = Path(settings.FABRICMON_UPLOAD_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"run{run.pk}-{uuid.uuid4().hex}.trace"
    with path.open("wb") as out:
        for chunk in (
            upload_file.chunks()
            if hasattr(upload_file, "chunks")
            else iter(lambda: upload_file.read(1 << 20), b"")
        ):
            out.write(chunk)
    upload = TraceUpload.objects.create(
        run=run,
        kind=kind,
        filename=filename[:255],
        rank=rank,
        size_bytes=size_bytes or path.stat().st_size,
        state=TraceUpload.State.QUEUED,
        path=str(path),
    )

    def send() -> None:
        try:
            enqueue(upload.pk)
        except Exception as exc:  # broker unreachable: say so now, leave no row waiting forever
            path.unlink(missing_ok=True)
            reason = (
                f"the import queue is unreachable ({type(exc).__name__}: {exc}); "
                "nothing was imported — upload the file again"
            )
            TraceUpload.objects.filter(pk=upload.pk).update(
                state=TraceUpload.State.FAILED, error=reason, path="", finished_at=timezone.now()
            )
            raise ImportQueueUnavailableError(reason) from exc

    transaction.on_commit(send)  # outside a transaction (the API view): runs, and raises, now
    return upload


class ImportQueueUnavailableError(Exception):
    """The Celery broker refused the import task: the upload is marked failed and its file gone."""


def import_queued(upload_id: int) -> TraceUpload | None:
    """The worker's side of ``queue_import``: claim the upload (queued, or running but not heard
    of for ``STALE_IMPORT_S`` — its worker died; re-importing is safe, events are idempotent),
    import the saved file, delete it. None when there was nothing to do."""
    stale = timezone.now() - timedelta(seconds=STALE_IMPORT_S)
    claimable = Q(state=TraceUpload.State.QUEUED) | Q(state=TraceUpload.State.RUNNING, updated_at__lt=stale)
    claimed = TraceUpload.objects.filter(claimable, pk=upload_id).update(
        state=TraceUpload.State.RUNNING, bytes_read=0, updated_at=timezone.now()
    )
    if not claimed:
        return None
    upload = TraceUpload.objects.select_related("run").get(pk=upload_id)
    path = Path(upload.path)

    def clean_up() -> None:
        path.unlink(missing_ok=True)
        TraceUpload.objects.filter(pk=upload_id).update(path="")

    try:
        with path.open("rb") as stream:
            run_import(upload, stream, before_done=clean_up)
    except InputError:
        pass  # recorded on the upload (state failed, error)
    except FileNotFoundError:
        TraceUpload.objects.filter(pk=upload_id).update(
            state=TraceUpload.State.FAILED,
            error="the uploaded file is gone (saved on another machine, or cleaned up)",
            finished_at=timezone.now(),
        )
    finally:
        clean_up()  # failed: the row says why (a dead worker never gets here; its redelivery finds the file)
    upload.refresh_from_db()
    return upload
