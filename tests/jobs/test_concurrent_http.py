"""Nothing hangs under concurrent load through the real server: several threads post event batches
while others stream the events export and fetch static files, all at once. Every request has a
bounded wait, and so does every thread: a stall fails the test instead of hanging it.

Issue 13 saw this wedge: a process-global warnings filter in the ingest parser turned other
requests' warnings into exceptions, streaming responses failed and ``/static/*`` and the export
hung until Daphne restarted."""

from __future__ import annotations

import ast
import http.client
import json
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor, wait

import pytest
from asgi_server import live_server

pytestmark = pytest.mark.integration
T0 = 1_795_987_668_367_402_543
PREFILLED = 20_000
WRITERS, BATCHES, LINES = 4, 6, 2000  # big batches: the parser's numpy reads last long enough to overlap
REQUEST_S, THREAD_S = 60, 240

FILL = """
from django.contrib.auth import get_user_model
from fabricmon.jobs.runs import create_run
from fabricmon.jobs.tokens import issue_token
from tests.jobs.long_runs import fill_run
user = get_user_model().objects.create_user("busy")
run = create_run(user, "busy", world_size=16)
fill_run(run, {n}, ranks=16)
print(repr((run.pk, issue_token(user, "busy")[1])))
"""
COUNT = """
from fabricmon.jobs import blocks
from fabricmon.jobs.models import Run
print(blocks.event_count(Run.objects.get(pk={run})))
"""


@pytest.fixture(scope="module")
def busy(redis_url: str, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    srv = live_server(tmp_path_factory.mktemp("busy"), redis_url, FABRICMON_INGEST_RATE_PER_S="0")
    run, token = ast.literal_eval(srv.manage("shell", "-c", FILL.format(n=PREFILLED)).strip().splitlines()[-1])
    yield srv, run, token
    srv.stop()


def _conn(url: str) -> http.client.HTTPConnection:
    u = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=REQUEST_S)  # every read bounded


def _writer(url: str, run: int, token: str, w: int) -> int:
    stored = 0
    for b in range(BATCHES):
        lines = []
        for i in range(LINES):
            k = (w * BATCHES + b) * LINES + i
            lines.append(json.dumps({
                "id": f"busy{k}", "rank": k % 16, "step": 1000 + b, "layer": w, "phase": "dispatch",
                "start_ns": T0 + k * 1000, "end_ns": T0 + k * 1000 + 500, "source": "probe",
                "send_bytes_per_peer": {str(p): 64 + p for p in range(16)},
            }))
        conn = _conn(url)
        conn.request("POST", f"/jobs/api/runs/{run}/events", "\n".join(lines).encode(),
                     {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        conn.close()
        assert resp.status == 200, body
        stored += body["stored"]
    return stored


def _exporter(url: str, run: int, token: str, stop: threading.Event) -> int:
    rounds = 0
    while not stop.is_set() or rounds < 2:
        conn = _conn(url)
        conn.request("GET", f"/jobs/api/runs/{run}/events", headers={"Authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        assert resp.status == 200
        lines = resp.read().count(b"\n")
        conn.close()
        assert lines >= PREFILLED, lines
        rounds += 1
    return rounds


def _static(url: str, stop: threading.Event) -> int:
    fetched = 0
    while not stop.is_set() or fetched < 10:
        for path in ("/static/live/heatmap.js", "/static/jobs/timeline.js", "/static/base/favicon.svg"):
            conn = _conn(url)
            conn.request("GET", path)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            assert resp.status == 200 and data, (path, resp.status)
            fetched += 1
    return fetched


def test_ingest_export_and_static_files_at_once_never_stall(busy) -> None:  # type: ignore[no-untyped-def]
    srv, run, token = busy
    stop = threading.Event()
    pool = ThreadPoolExecutor(max_workers=WRITERS + 5)
    try:
        writers = [pool.submit(_writer, srv.url, run, token, w) for w in range(WRITERS)]
        readers = [pool.submit(_exporter, srv.url, run, token, stop) for _ in range(2)]
        statics = [pool.submit(_static, srv.url, stop) for _ in range(3)]
        _, pending = wait(writers, timeout=THREAD_S)
        stop.set()
        _, pending_readers = wait(readers + statics, timeout=THREAD_S)
        assert not pending and not pending_readers, "a thread stalled: the server stopped answering"
        stored = sum(f.result() for f in writers)
        exports = [f.result() for f in readers]
        statics_n = [f.result() for f in statics]
    finally:
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)  # a stalled thread must not hang the test
    assert stored == WRITERS * BATCHES * LINES
    assert min(exports) >= 2 and min(statics_n) >= 10
    total = int(srv.manage("shell", "-c", COUNT.format(run=run)).strip().splitlines()[-1])
    assert total == PREFILLED + stored
