"""Trace uploads: small files are imported inside the request; larger ones (or ``mode=queue``) are
saved and imported by the Celery task ``jobs.import_upload`` (eager here; a real worker in
``test_upload_worker``), whose progress the API and the run page read from the upload row."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from fabricmon.celery import app
from fabricmon.jobs import blocks, imports
from fabricmon.jobs.models import Run, TraceUpload
from fabricmon.jobs.tokens import issue_token

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_ingest", ROOT / "bench" / "ingest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> tuple[bytes, int]:
    """A 1 MB gloo-style Kineto trace (the bench's generator) and its number of all-to-alls."""
    path = tmp_path_factory.mktemp("trace") / "kineto_rank1.json"
    n_a2a = _bench().write_trace(path, 1)
    return path.read_bytes(), n_a2a


@pytest.fixture
def uploads(db, settings, tmp_path, django_capture_on_commit_callbacks):
    settings.FABRICMON_UPLOAD_DIR = tmp_path / "uploads"
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True  # the task runs in this process, at commit
    users = get_user_model()
    alice = users.objects.create_user("alice", password="pw-alice-123")
    bob = users.objects.create_user("bob", password="pw-bob-123")
    _, token = issue_token(alice)
    run = Run.objects.create(owner=alice, name="r")
    client = Client()

    def post(body: bytes, name: str = "kineto_rank1.json", **fields):
        f = io.BytesIO(body)
        f.name = name
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(
                f"/jobs/api/runs/{run.pk}/uploads",
                {"kind": "kineto", "file": f, **fields},
                HTTP_AUTHORIZATION=f"Bearer {token}",
            )

    def get(path: str):
        return client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}")

    yield {"post": post, "get": get, "run": run, "alice": alice, "bob": bob, "dir": tmp_path / "uploads"}
    app.conf.task_always_eager = eager


def test_a_queued_upload_answers_202_and_imports_with_progress(uploads, trace) -> None:
    body, n_a2a = trace
    resp = uploads["post"](body, mode="queue")
    assert resp.status_code == 202, resp.content
    queued = resp.json()
    assert queued["state"] == "queued" and queued["size_bytes"] == len(body)
    status = uploads["get"](queued["status_url"]).json()  # the eager task ran at commit
    assert status["state"] == "done", status
    assert status["bytes_read"] == status["size_bytes"] == len(body)
    assert (status["events_stored"], status["events_duplicate"], status["events_rejected"]) == (n_a2a, 0, 0)
    assert blocks.event_count(uploads["run"], source="kineto") == n_a2a
    assert list(uploads["dir"].iterdir()) == []  # the saved file is gone once imported
    listed = uploads["get"](f"/jobs/api/runs/{uploads['run'].pk}/uploads").json()["uploads"]
    assert [u["upload"] for u in listed] == [queued["upload"]]
    # the same file again, inline: same answer shape as before, every event a duplicate
    again = uploads["post"](body, mode="inline")
    assert again.status_code == 200 and (again.json()["stored"], again.json()["duplicates"]) == (0, n_a2a)
    assert again.json()["state"] == "done"


def test_auto_mode_queues_uploads_above_the_inline_limit(uploads, trace, settings) -> None:
    body, _ = trace
    settings.FABRICMON_UPLOAD_INLINE_BYTES = len(body)
    assert uploads["post"](body).status_code == 200  # at the limit: inline
    settings.FABRICMON_UPLOAD_INLINE_BYTES = len(body) - 1
    assert uploads["post"](body).status_code == 202  # above: queued
    resp = uploads["post"](body, mode="sometimes")
    assert resp.status_code == 400 and resp.json()["field"] == "mode"


def test_auto_mode_judges_a_gzip_upload_by_what_it_inflates_to(uploads, trace, settings) -> None:
    import gzip

    body, _ = trace
    packed = gzip.compress(body)
    # compressed it fits under the limit; inflated it does not: queued (was imported in the request)
    settings.FABRICMON_UPLOAD_INLINE_BYTES = len(body) - 1
    assert len(packed) < len(body) - 1
    assert uploads["post"](packed).status_code == 202
    settings.FABRICMON_UPLOAD_INLINE_BYTES = max(len(body), 30 * len(packed))
    assert uploads["post"](packed).status_code == 200


def test_a_queued_upload_that_is_not_a_trace_fails_with_the_reason(uploads) -> None:
    resp = uploads["post"](b'{"traceEvents": [{"ph": "X", "name": "a"', mode="queue")
    assert resp.status_code == 202
    status = uploads["get"](resp.json()["status_url"]).json()
    assert status["state"] == "failed" and "not valid JSON" in status["error"], status
    assert status["finished_at"] and list(uploads["dir"].iterdir()) == []
    # cheap checks still answer at once: unknown kind, Flight Recorder without a rank
    bad_kind = uploads["post"](b"{}", mode="queue", kind="nsys")
    assert bad_kind.status_code == 400 and bad_kind.json()["field"] == "kind"
    no_rank = uploads["post"](b"{}", "fr.json", mode="queue", kind="fr")  # no rank in its name either
    # well-formed, but this file cannot be placed without a rank (the schema cannot say so): 422
    assert no_rank.status_code == 422 and no_rank.json()["field"] == "rank"
    assert TraceUpload.objects.filter(run=uploads["run"]).count() == 1


def test_a_redelivered_import_runs_once_and_a_stale_one_is_taken_over(uploads, trace) -> None:
    body, n_a2a = trace
    queued: list[int] = []
    upload = imports.queue_import(uploads["run"], "kineto", io.BytesIO(body), filename="t.json",
                                  enqueue=queued.append)
    path = Path(upload.path)
    assert path.exists() and TraceUpload.objects.get(pk=upload.pk).state == "queued"
    # a worker died mid-import: the row says running, not heard of for a while
    TraceUpload.objects.filter(pk=upload.pk).update(state="running")
    assert imports.import_queued(upload.pk) is None  # still fresh: someone else is on it
    imports.STALE_IMPORT_S, old = -1, imports.STALE_IMPORT_S
    try:
        done = imports.import_queued(upload.pk)
    finally:
        imports.STALE_IMPORT_S = old
    assert done is not None and done.state == "done" and done.events_stored == n_a2a
    assert not path.exists() and done.path == ""
    assert imports.import_queued(upload.pk) is None  # a redelivered task does nothing


def test_progress_is_written_while_reading(uploads, trace, monkeypatch) -> None:
    body, n_a2a = trace
    seen: list[tuple[str, int]] = []

    monkeypatch.setattr(imports, "PROGRESS_EVERY_S", 0.0)  # every read reports
    upload = TraceUpload.objects.create(
        run=uploads["run"], kind="kineto", size_bytes=len(body), state="running"
    )

    class Watch(io.BytesIO):
        def read(self, size=-1):  # what the row says while the importer reads
            row = TraceUpload.objects.filter(pk=upload.pk).values_list("state", "bytes_read").get()
            seen.append(row)
            return super().read(size)

    result = imports.run_import(upload, Watch(body))
    assert result.stored == n_a2a
    positions = [b for _, b in seen]
    assert all(state == "running" for state, _ in seen)
    assert max(positions) > 0 and positions[-1] <= len(body)  # progress was visible mid-import
    assert TraceUpload.objects.get(pk=upload.pk).bytes_read == len(body)


def test_run_page_follows_a_queued_import(uploads, trace, django_capture_on_commit_callbacks) -> None:
    body, n_a2a = trace
    client = Client()
    client.force_login(uploads["alice"])
    run = uploads["run"]
    f = io.BytesIO(body)
    f.name = "kineto_rank1.json"
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post(f"/jobs/runs/{run.pk}/upload", {"kind": "kineto", "mode": "queue", "file": f})
    assert resp.status_code == 202
    status_url = resp.json()["status_url"]
    assert status_url == f"/jobs/runs/{run.pk}/uploads/{resp.json()['upload']}.json"
    row = client.get(status_url).json()
    assert row["state"] == "done" and row["events_stored"] == n_a2a
    page = client.get(f"/jobs/runs/{run.pk}/").content.decode()
    assert 'data-state="done"' in page and f"{n_a2a} stored" in page
    other = Client()
    other.force_login(uploads["bob"])
    assert other.get(status_url).status_code == 404  # someone else's run


def test_openapi_describes_the_upload_status(uploads, trace) -> None:
    schema = Client().get("/jobs/api/openapi.json").json()
    assert "/jobs/api/runs/{run_id}/uploads/{upload_id}" in schema["paths"]
    assert "202" in schema["paths"]["/jobs/api/runs/{run_id}/uploads"]["post"]["responses"]
    upload_schema = schema["components"]["schemas"]["Upload"]
    row = uploads["post"](trace[0], mode="queue").json()
    assert set(upload_schema["required"]) <= set(row) and set(row) <= set(upload_schema["properties"])


def test_the_cli_imports_synchronously(uploads, trace, tmp_path) -> None:
    """``manage.py import_trace`` reads the file in its own process (no worker) and leaves a done
    upload row with the counts; a format error is a CommandError naming it."""
    from django.core.management import CommandError, call_command

    body, n_a2a = trace
    path = tmp_path / "kineto_rank1.json"
    path.write_bytes(body)
    out = io.StringIO()
    call_command("import_trace", str(uploads["run"].pk), "kineto", str(path), stdout=out)
    assert f"stored {n_a2a}, duplicates 0, rejected 0" in out.getvalue()
    row = TraceUpload.objects.get(run=uploads["run"])
    assert (row.state, row.bytes_read, row.events_stored) == ("done", len(body), n_a2a)
    path.write_bytes(body[: len(body) // 2])
    with pytest.raises(CommandError, match="not valid JSON"):
        call_command("import_trace", str(uploads["run"].pk), "kineto", str(path))
    assert TraceUpload.objects.filter(run=uploads["run"], state="failed").count() == 1
