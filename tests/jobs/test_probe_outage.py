"""The probe across a restart of the real server during a real gloo run: nothing lost, nothing
stored twice; what a too-small spool had to drop is counted, reported and shown on the run page;
a wrong token, another user's run or no such run is refused once, with one message. (The 2-minute outage of issue 13 is
``bench/probe_outage.py``; here 15 s.)

Scenario (``probe_outage.py``)::

    4 gloo ranks ──probe──▶ fabricmon.serve :P ──SIGTERM── 15 s down ── fabricmon.serve :P again
    pytest: a second poster with a 20-event spool submits 50 events while the server is down
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
from asgi_server import session_cookie
from probe_outage import PASSWORD, USER, OutageStack, gloo_job_through_outage, outage_stack

from collectors.probe import EventPoster, IngestClient

pytestmark = [pytest.mark.integration]
OUTAGE_S = 15.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, redis_url: str):  # type: ignore[no-untyped-def]
    with outage_stack(tmp_path_factory.mktemp("probe-outage"), redis_url) as s:
        yield s


def _event(i: int) -> dict[str, Any]:
    now = time.time_ns()
    return {"id": f"spill-{i}", "rank": 0, "step": i, "phase": "other", "start_ns": now, "end_ns": now + 1}


@pytest.mark.timeout(900)
def test_a_gloo_run_across_a_server_restart_loses_nothing_and_counts_what_a_small_spool_drops(
    stack: OutageStack, tmp_path: Path
) -> None:
    client = IngestClient(stack.base, stack.token)
    spill_run = client.create_run("spill", world_size=1)
    spill: list[EventPoster] = []

    def during_outage() -> None:
        poster = EventPoster(client, spill_run, batch_size=5, max_buffer=20, flush_interval_s=0.05,
                             measure_clock=False)  # fmt: skip
        spill.append(poster)
        poster.submit(_event(0))
        while poster.stats.failed_posts < 1:  # event 0 in flight against the stopped server
            time.sleep(0.01)
        for i in range(1, 50):
            poster.submit(_event(i))

    result = gloo_job_through_outage(stack, tmp_path, outage_s=OUTAGE_S, steps=60, step_s=0.5,
                                     during=during_outage)  # fmt: skip
    assert result.outage_s >= OUTAGE_S
    assert result.sent == 4 * 60 * 2 * 4  # ranks × steps × layers × (dispatch, combine and their bwd)
    assert (result.lost, result.duplicates_stored, result.unknown_stored) == (0, 0, 0), result
    assert result.stored == result.sent
    for p in result.posters:
        assert (p["dropped"], p["unsent"], p["rejected"], p["error"], p["probe_errors"]) == (0, 0, 0, "", 0), p
    assert sum(p["failed_posts"] for p in result.posters) >= 4, "the outage was not seen by every rank"

    # the small spool: event 0 (in flight) and the newest 19 kept, the 30 between dropped and counted
    poster = spill[0]
    assert poster.flush(timeout_s=60)
    stats = poster.close()
    assert (stats.posted, stats.dropped, stats.unsent) == (20, 30, 0)
    kept = sorted(stack.exported_ids(spill_run), key=lambda i: int(i.split("-")[1]))
    assert kept == [f"spill-{i}" for i in [0, *range(31, 50)]]
    assert client.request("GET", f"/jobs/api/runs/{spill_run}")[1]["probe_dropped"] == 30
    page = _page(stack, f"/jobs/runs/{spill_run}/")
    assert "30 events dropped by the job&#x27;s probe" in page or "30 events dropped by the job's probe" in page
    assert "no events dropped by the probe" in _page(stack, f"/jobs/runs/{result.run_id}/")


def _page(stack: OutageStack, path: str) -> str:
    import urllib.request

    req = urllib.request.Request(stack.base + path, headers={"Cookie": session_cookie(stack.server, USER, PASSWORD)})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.read().decode()


def test_a_wrong_token_or_run_is_refused_once_with_one_message(
    stack: OutageStack, caplog: pytest.LogCaptureFixture
) -> None:
    good = IngestClient(stack.base, stack.token)
    run_id = good.create_run("refusals")
    other = IngestClient(stack.base, stack.server.manage("create_api_token", "someone-else", "--create-user").strip())
    cases = [(IngestClient(stack.base, "fmj_wrong_token"), run_id, "401 invalid or revoked API token"),
             (other, run_id, f"404 no run {run_id}"),  # another user's run: as if there were none
             (good, 10**9, f"404 no run {10**9}")]  # fmt: skip
    for client, run, error in cases:
        caplog.clear()
        with caplog.at_level(logging.WARNING, "collectors.probe"):
            poster = EventPoster(client, run, batch_size=5, flush_interval_s=0.05, measure_clock=False)
            for i in range(20):
                poster.submit(_event(i))
            poster.flush(timeout_s=30)
            for i in range(20, 40):
                poster.submit(_event(i))
            stats = poster.close(timeout_s=5)
        assert stats.error == error
        assert (stats.posted, stats.lost) == (0, 40)
        assert [r.levelname for r in caplog.records] == ["ERROR"], [r.getMessage() for r in caplog.records]
    assert stack.exported_ids(run_id) == []


def test_a_malformed_dropped_count_is_a_400_naming_the_header(stack: OutageStack) -> None:
    client = IngestClient(stack.base, stack.token)
    run_id = client.create_run("bad headers")
    line = b'{"id": "h-1", "rank": 0, "start_ns": 1795989557414430475, "end_ns": 1795989557414430476}'
    for headers, field in (({"X-Probe-Dropped": "-1"}, "X-Probe-Dropped"),
                           ({"X-Probe-Session": "a b", "X-Probe-Dropped": "1"}, "X-Probe-Session")):  # fmt: skip
        answer = client.send_events(run_id, line, headers=headers)
        assert (answer.status, answer.body["field"]) == (400, field)
    assert client.send_events(run_id, line, headers={"X-Probe-Dropped": "7"}).status == 200
    assert client.send_events(run_id, line, headers={"X-Probe-Dropped": "3"}).status == 200  # older total
    assert client.request("GET", f"/jobs/api/runs/{run_id}")[1]["probe_dropped"] == 7
