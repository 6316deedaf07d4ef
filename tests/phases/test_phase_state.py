"""The run's incremental state on a reported twin run (ingest through the probe's client path to
pytest-django's live server, counters in real Redis): an update reads only the event blocks and
matrices that arrived since, an unchanged run is answered without reading anything, and the
incremental answer is the answer computed from scratch."""

from __future__ import annotations

import time

import numpy as np
import pytest
from phase_twin import T0_NS, recording, write_counters

from collectors.probe import EventPoster, IngestClient
from fabricmon.base import keys
from fabricmon.jobs import runs
from fabricmon.jobs.models import EventBlock, Run
from fabricmon.jobs.tokens import issue_token
from fabricmon.phases import counters, services
from fabricmon.phases.state import PXN, RunPhaseState

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def post(client: IngestClient, run_id: int, events) -> None:  # type: ignore[no-untyped-def]
    poster = EventPoster(client, run_id, batch_size=2_000, max_buffer=1 << 22, max_buffer_bytes=1 << 36,
                         measure_clock=True)
    for ev in events:
        poster.submit(ev)
    stats = poster.close(timeout_s=300)
    assert stats.posted > 0 and stats.rejected == 0 and stats.dropped == 0, stats


def same(a, b) -> None:  # type: ignore[no-untyped-def]
    assert a.error == b.error and a.meta == b.meta and set(a.views) == set(b.views)
    for name, v in a.views.items():
        w = b.views[name]
        assert (v.verdict, v.columns, [g.reason for g in v.gates]) == (
            w.verdict,
            w.columns,
            [g.reason for g in w.gates],
        ), name
        if v.load_bytes is None:
            assert w.load_bytes is None
        else:
            np.testing.assert_allclose(v.load_bytes, w.load_bytes, rtol=1e-12, atol=1e-6)


def test_an_update_reads_only_what_arrived_and_equals_a_fresh_answer(
    live_server, django_user_model, redis_client, fabric_name
) -> None:
    rec = recording(fabric_name)
    write_counters(redis_client, rec)
    user = django_user_model.objects.create_user("owner-state", password="pw")
    run = runs.create_run(user, "incremental", fabric=fabric_name, world_size=rec.world_size)
    client = IngestClient(live_server.url, issue_token(user)[1])
    status, body = client.post_rank_map(run.pk, rec.rank_map())
    assert status < 300, body
    events = sorted(rec.events(), key=lambda e: e["start_ns"])
    cut = T0_NS + 30_000_000_000
    try:
        post(client, run.pk, [e for e in events if e["start_ns"] < cut])
        first = services.phase_snapshot(run)
        assert first.error is None and first.views["projected"].verdict == "show"
        st = services.state.run_state(run)
        before = dict(st.stats)
        assert services.phase_snapshot(Run.objects.get(pk=run.pk)) is first  # nothing new: no recompute
        assert st.stats == before

        blocks_before = EventBlock.objects.filter(run=run).count()
        post(client, run.pk, [e for e in events if e["start_ns"] >= cut])
        t0 = time.perf_counter()
        second = services.phase_snapshot(Run.objects.get(pk=run.pk))
        t_update = time.perf_counter() - t0
        new_blocks = EventBlock.objects.filter(run=run).count() - blocks_before
        assert st.stats["blocks_read"] - before["blocks_read"] == new_blocks
        projected_now = st.stats["columns_projected"] - before["columns_projected"]
        n_second = len(second.views["projected"].columns)
        new_cols = set(second.views["projected"].columns) - set(first.views["projected"].columns)
        # the window's new columns, plus the few a batch boundary split between the two posts (they grew)
        assert len(new_cols) <= projected_now <= len(new_cols) + 2 * 2 * rec.cfg.job.layers
        # the window slid: what left it was let go (events of old steps no counter still holds)
        lo = second.meta["window"]["steps"][0]
        kept = st.events
        assert ((kept["step"] >= lo) | (kept["end_ns"] >= counters.first_edge(fabric_name))).all()
        assert all(k[0] >= lo for cache in st.projected.values() for k in cache.rows_in)
        # the attribution was not refitted: the intervals kept after the first answer stayed summed,
        # only the new ones and the open tail were added (the answer still equals a fresh one, below)
        assert before["intervals_folded"] >= 10 and st.stats["attribution_rebuilds"] == 0, st.stats
        assert st.stats["intervals_folded"] > before["intervals_folded"], st.stats
        # (the first answer's attributed view is withheld — counters run on past the posted events,
        # residual > 50 % — the second is drawn, and is compared value by value with a fresh one)
        assert second.views["attributed"].verdict == "show" and second.views["attributed"].load_bytes is not None
        t0 = time.perf_counter()
        fresh = RunPhaseState(run.pk, None).snapshot(Run.objects.get(pk=run.pk), PXN)
        t_fresh = time.perf_counter() - t0
        t0 = time.perf_counter()
        services.phase_snapshot(Run.objects.get(pk=run.pk))
        t_unchanged = time.perf_counter() - t0
        same(second, fresh)
        print(
            f"\nphase state, {n_second} columns: update with the last 10 s {t_update * 1e3:.0f} ms "
            f"({projected_now} columns projected), from scratch {t_fresh * 1e3:.0f} ms, "
            f"unchanged {t_unchanged * 1e3:.1f} ms"
        )
        assert services.phase_views(run)["views"]["projected"]["columns"] == [
            list(c) for c in second.views["projected"].columns
        ]
    finally:
        redis_client.delete(keys.frames(fabric_name))
