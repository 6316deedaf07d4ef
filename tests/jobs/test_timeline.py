"""The run page's timeline, aggregated on the server: ranks × time buckets whose answer is bounded
by the screen (buckets × rows), not by the run's length; exact events when a zoomed span holds few.
Real database rows through the real ingest path and the real view."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from collectors.traces.schema import PHASES
from fabricmon.jobs import runs
from fabricmon.jobs.timeline import EXACT_LIMIT, TimelineQuery, ranks_by_time
from tests.jobs.long_runs import PHASE_MS, T0_NS, fill_run

pytestmark = pytest.mark.django_db
MS = 1_000_000


def _u8(out: dict, name: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(out[name]), np.uint8).reshape(out["rows"], out["buckets"])


@pytest.fixture
def owner_client(client):
    user = get_user_model().objects.create_user("tl-owner", password="pw")
    client.force_login(user)
    return user, client


def test_cells_are_busy_share_and_dominant_phase_per_rank_and_bucket(owner_client) -> None:
    user, client = owner_client
    run = runs.create_run(user, "small", world_size=4)
    fill_run(run, 4 * 8, ranks=4)  # 8 calls: 4 layers × (dispatch, combine), 10 ms apart, 4 ms each
    # buckets of 10 ms from T0: call c occupies bucket c for 4 ms (+ rank·10 µs skew)
    out = client.get(f"/jobs/runs/{run.pk}/timeline.json",
                     {"t1_ns": T0_NS, "t2_ns": T0_NS + 80 * MS, "buckets": 8}).json()
    assert (out["rows"], out["ranks_per_row"], out["events"]) == (4, 1, 32)
    busy, phase = _u8(out, "busy"), _u8(out, "phase")
    assert np.all(busy == np.ceil(PHASE_MS / 10 * 254))  # 40 % of every cell, every rank
    names = [[PHASES[c] for c in row] for row in phase.tolist()]
    assert all(r == ["dispatch", "combine"] * 4 for r in names)
    assert sorted(out["exact"]["rank"]) == sorted([0, 1, 2, 3] * 8)  # few events: the bars too


def test_an_event_is_split_over_the_buckets_it_spans_and_ranks_group_into_rows(owner_client) -> None:
    user, _client = owner_client
    run = runs.create_run(user, "wide", world_size=10)
    fill_run(run, 10 * 2, ranks=10)
    # 2 ms buckets: each 4 ms event fills two buckets entirely; 10 ranks in rows of 3 (4 rows)
    out = ranks_by_time(run, TimelineQuery(t1_ns=T0_NS, t2_ns=T0_NS + 20 * MS, buckets=10, max_rows=4))
    assert (out["rows"], out["ranks_per_row"]) == (4, 3)
    busy = _u8(out, "busy")
    # row 0 holds ranks 0-2: busy in buckets 0-1 (dispatch, 0–4 ms) and 5-6 (combine, 10–14 ms);
    # the 10-30 µs rank skew spills a sliver into the next bucket (drawn, never hidden)
    assert busy[0, 1] == 254 and busy[0, 6] == 254  # [2, 4) ms: all three ranks busy throughout
    assert busy[0, 0] == np.ceil((6 - 0.03) / 6 * 254)  # ranks 1, 2 enter 10 and 20 µs late
    assert busy[0, 3] == 0 and busy[0, 8] == 0
    assert 0 < busy[0, 2] < 10
    assert busy[3, 0] == np.ceil((2 - 0.09) / 2 * 254)  # the last row: rank 9 alone, 90 µs late


def test_bad_queries_are_a_400_naming_the_parameter(owner_client) -> None:
    user, client = owner_client
    run = runs.create_run(user, "bad", world_size=2)
    url = f"/jobs/runs/{run.pk}/timeline.json"
    for params, word in [({"buckets": 0}, "buckets"), ({"buckets": 10**6}, "buckets"), ({"rows": -1}, "rows"),
                         ({"t1_ns": "x"}, "t1_ns"), ({"t1_ns": 5, "t2_ns": 5}, "t2_ns"),
                         ({"source": "nope"}, "source")]:
        resp = client.get(url, params)
        assert resp.status_code == 400 and word in resp.json()["error"], (params, resp.content)
    empty = client.get(url).json()
    assert empty["empty"] and empty["reason"] == "no events yet"


@pytest.mark.slow
def test_a_run_of_a_million_events_answers_the_same_size_with_the_same_queries(owner_client) -> None:
    """The whole-run view of 1 M events (256 ranks, 1,000 blocks) is the same few hundred KB and the
    same number of queries as that of 10 k events; zoomed to 40 ms it holds the exact bars.
    Its time is measured by bench/run_timeline.py (≤ 1 s: no timing asserts in tests)."""
    user, client = owner_client
    answers, queries = {}, {}
    for n in (10_000, 1_000_000):
        run = runs.create_run(user, f"long-{n}", world_size=256)
        fill_run(run, n, ranks=256)
        with CaptureQueriesContext(connection) as ctx:
            resp = client.get(f"/jobs/runs/{run.pk}/timeline.json")
        assert resp.status_code == 200
        answers[n], queries[n] = resp.json(), len(ctx.captured_queries)
        assert answers[n]["events"] == n and answers[n]["rows"] == 256
        assert "exact" not in answers[n]
        size = len(resp.content)
        assert size < 600_000, size
    assert queries[10_000] == queries[1_000_000]
    assert len(answers[10_000]["busy"]) == len(answers[1_000_000]["busy"])
    # every call of the long run is visible: each bucket of the whole-run view has activity
    assert np.all(_u8(answers[1_000_000], "busy").max(axis=0) > 0)
    zoom = client.get(f"/jobs/runs/{run.pk}/timeline.json",
                      {"t1_ns": T0_NS + 600_000 * MS // 100, "t2_ns": T0_NS + 600_000 * MS // 100 + 40 * MS}).json()
    assert 0 < zoom["events"] <= EXACT_LIMIT and len(zoom["exact"]["rank"]) == zoom["events"]
