"""views.json off the request (fabricmon/phases/refresher.py), on a reported twin run: while only
counter frames and events streamed in, a watched run is answered from its last views — also while
another computation holds the lock — and the refresher thread brings them up to date; a change
made by hand (the rank map) is always computed in the request."""

from __future__ import annotations

import threading

import pytest
from phase_twin import T0_NS, recording
from test_phase_state import post

from collectors.probe import IngestClient
from fabricmon.base import keys
from fabricmon.jobs import runs
from fabricmon.jobs.tokens import issue_token
from fabricmon.phases import refresher, state
from fabricmon.telemetry import live_window

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _views(client, run_id: int) -> dict:  # type: ignore[no-untyped-def]
    resp = client.get(f"/phases/runs/{run_id}/views.json")
    assert resp.status_code == 200
    return resp.json()


def _wait(predicate, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    done = threading.Event()
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return True
        done.wait(0.05)
    return predicate()


def test_a_watched_run_is_answered_from_its_recent_views_and_refreshed_off_the_request(
    live_server, django_user_model, client, redis_client, fabric_name, settings
) -> None:
    settings.FABRICMON_PHASES_MAX_STALE_S = 60.0  # long: this test is about order, not seconds
    settings.FABRICMON_PHASES_TICK_S = 0.2
    rec = recording(fabric_name)
    frames = rec.counter_frames(1.0)
    half = len(frames) // 2
    for f in frames[:half]:
        live_window.append(redis_client, f, max_frames=10_000)
    user = django_user_model.objects.create_user("owner-refresh", password="pw")
    client.force_login(user)
    run = runs.create_run(user, "refreshed", fabric=fabric_name, world_size=rec.world_size)
    ingest = IngestClient(live_server.url, issue_token(user)[1])
    status, body = ingest.post_rank_map(run.pk, rec.rank_map())
    assert status < 300, body
    events = sorted(rec.events(), key=lambda e: e["start_ns"])
    cut = T0_NS + 25_000_000_000
    post(ingest, run.pk, [e for e in events if e["start_ns"] < cut])
    try:
        first = _views(client, run.pk)  # nobody watched it: computed in the request
        assert "projected" in first["views"], first.get("error")
        st = state.run_state(run)
        v1 = st.results[state.PXN].snap.version

        # another computation holds the lock for as long as it likes (the refresher cannot run
        # either): only counters are newer, and the request does not wait on it
        answered: list[dict] = []
        with state.COMPUTE_LOCK:
            for f in frames[half:]:
                live_window.append(redis_client, f, max_frames=10_000)
            asker = threading.Thread(target=lambda: answered.append(_views(client, run.pk)))
            asker.start()
            asker.join(30)
            assert answered, "views.json waited on a computation although a recent answer was there"
        assert answered[0]["views"] == first["views"] and answered[0]["current_at_ns"] >= first["current_at_ns"]

        # the refresher reads the new frames and recomputes, off the request
        assert _wait(lambda: st.results[state.PXN].snap.version > v1, 20)
        refreshed = _views(client, run.pk)
        assert refreshed["current_at_ns"] > first["current_at_ns"]
        assert refreshed["views"]["measured"] != first["views"]["measured"]  # the later frames are in

        # events streamed in: they may wait for the refresher (within the staleness bound) …
        post(ingest, run.pk, [e for e in events if e["start_ns"] >= cut])
        newest = max(e["step"] for e in events)
        assert max(c[0] for c in refreshed["views"]["projected"]["columns"]) < newest
        assert _wait(lambda: max(c[0] for c in _views(client, run.pk)["views"]["projected"]["columns"]) == newest,
                     20)
        latest = _views(client, run.pk)
        # … while what a person changes by hand (here the rank map: two ranks on different hosts
        # swapped, rows upserted in place) is never answered from the old views: computed in the
        # request, even while another computation holds the lock
        entries = {e["rank"]: e for e in rec.rank_map()}
        a, b = 0, next(r for r, e in entries.items() if e["host"] != entries[0]["host"])
        swapped = [{**entries[b], "rank": a}, {**entries[a], "rank": b}]
        status, body = ingest.post_rank_map(run.pk, swapped)
        assert status < 300, body
        with state.COMPUTE_LOCK:  # (re-entrant: this thread computes while it holds it)
            now = _views(client, run.pk)
        assert now["views"]["projected"]["columns"] == latest["views"]["projected"]["columns"]
        assert now["views"]["projected"]["values"] != latest["views"]["projected"]["values"]
    finally:
        refresher.REFRESHER.stop()
        redis_client.delete(keys.frames(fabric_name))


def test_nothing_is_watched_when_requests_always_compute(settings) -> None:
    settings.FABRICMON_PHASES_MAX_STALE_S = 0.0
    refresher.REFRESHER.watch(12345)
    assert refresher.REFRESHER.watched() == []
