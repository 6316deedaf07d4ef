"""The phase views of a run of many ranks project each traffic matrix from its nonzero cells, one
at a time (a (K, R, R) stack was 127 MB a key at 5,632 ranks): on a reported twin run, forcing that
path gives the views the dense path gives — verdicts, columns, gates and load bytes."""

from __future__ import annotations

import numpy as np
import pytest
from phase_twin import recording, write_counters
from test_phase_state import post

from collectors.probe import EventPoster, IngestClient
from fabricmon.base import keys
from fabricmon.jobs import runs
from fabricmon.jobs.models import Run
from fabricmon.jobs.tokens import issue_token
from fabricmon.phases import state
from fabricmon.phases.state import PXN, RunPhaseState

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def same_views(got, want) -> None:  # type: ignore[no-untyped-def]
    """Both answered, with the same views, verdicts, columns and gates, and load bytes equal to
    float32 precision (the dense path and a row plus its parts sum in float32, the cells in
    float64)."""
    assert got.error is None and want.error is None and set(got.views) == set(want.views)
    for name, v in want.views.items():
        w = got.views[name]
        assert (v.verdict, v.columns, [g.reason for g in v.gates]) == (
            w.verdict, w.columns, [g.reason for g in w.gates]), name
        if v.load_bytes is None:
            assert w.load_bytes is None, name
        else:
            np.testing.assert_allclose(w.load_bytes, v.load_bytes, rtol=1e-5, atol=1.0)


def test_views_from_matrix_cells_equal_views_from_dense_matrices(
    live_server, django_user_model, redis_client, fabric_name, monkeypatch
) -> None:
    rec = recording(fabric_name)
    write_counters(redis_client, rec)
    user = django_user_model.objects.create_user("owner-cells", password="pw")
    run = runs.create_run(user, "cells", fabric=fabric_name, world_size=rec.world_size)
    client = IngestClient(live_server.url, issue_token(user)[1])
    status, body = client.post_rank_map(run.pk, rec.rank_map())
    assert status < 300, body
    try:
        post(client, run.pk, sorted(rec.events(), key=lambda e: e["start_ns"]))
        dense_state = RunPhaseState(run.pk, None)
        dense = dense_state.snapshot(Run.objects.get(pk=run.pk), PXN)
        monkeypatch.setattr(state, "PAIRS_FROM_CELLS", 0)
        cells_state = RunPhaseState(run.pk, None)
        cells = cells_state.snapshot(Run.objects.get(pk=run.pk), PXN)
        assert cells_state.stats["matrices_read"] == dense_state.stats["matrices_read"] > 0
        assert dense.views["projected"].verdict == "show"
        same_views(cells, dense)
    finally:
        redis_client.delete(keys.frames(fabric_name))


def test_views_read_unfolded_parts_without_writing_and_equal_the_settled_views(
    live_server, django_user_model, redis_client, fabric_name, monkeypatch
) -> None:
    """A large run's newest batches are parts beside its matrices (``matrix_parts``): the views sum
    them in without folding (reading writes nothing, in either table), an update reads only the
    new parts, and the answer is the one computed after the parts are folded in."""
    from fabricmon.jobs import matrices, matrix_parts
    from fabricmon.jobs.models import MatrixPart, TrafficMatrix

    rec = recording(fabric_name)
    write_counters(redis_client, rec)
    user = django_user_model.objects.create_user("owner-parts", password="pw")
    run = runs.create_run(user, "parts", fabric=fabric_name, world_size=rec.world_size)
    client = IngestClient(live_server.url, issue_token(user)[1])
    status, body = client.post_rank_map(run.pk, rec.rank_map())
    assert status < 300, body
    monkeypatch.setattr(matrices, "PAIRS_FROM_CELLS", 0)  # the ingest appends parts (same process)

    def tables() -> tuple[list[tuple[int, int]], list[int]]:
        return (sorted(TrafficMatrix.objects.filter(run=run).values_list("id", "calls")),
                sorted(MatrixPart.objects.filter(run=run).values_list("id", flat=True)))

    def post(events, batch_size: int) -> None:  # type: ignore[no-untyped-def]
        # small batches: a (step, layer, phase) spreads over several, so most become parts
        poster = EventPoster(client, run.pk, batch_size=batch_size, max_buffer=1 << 22, max_buffer_bytes=1 << 36,
                             measure_clock=True)
        for ev in events:
            poster.submit(ev)
        stats = poster.close(timeout_s=300)
        assert stats.posted == len(events) and stats.rejected == 0 and stats.dropped == 0, stats

    def settled_answer():  # type: ignore[no-untyped-def]
        parts = len(tables()[1])
        assert matrix_parts.settle(Run.objects.get(pk=run.pk)) == parts and not tables()[1]
        return RunPhaseState(run.pk, None).snapshot(Run.objects.get(pk=run.pk), PXN)

    try:
        events = sorted(rec.events(), key=lambda e: e["start_ns"])
        last = events[0]["step"] + 20  # (20 of its ~110 steps: enough for the views to be shown)
        events = [e for e in events if e["step"] < last]
        # a quarter of every phase's ranks first (batches of 6: half the phases over two), then the
        # rest: the first answer sums parts beside rows; before the second, those rows are folded
        quarter = rec.world_size // 4
        live = RunPhaseState(run.pk, None)
        post([e for e in events if e["rank"] < quarter], 6)
        before = tables()
        assert before[1], "no parts: the test would not read any"
        first = live.snapshot(Run.objects.get(pk=run.pk), PXN)
        assert tables() == before  # read; nothing folded or written
        same_views(first, settled_answer())  # (the fold changes the rows: the next answer reads them anew)
        post([e for e in events if e["rank"] >= quarter], 60)
        before = tables()
        read_before = live.stats["matrices_read"]
        second = live.snapshot(Run.objects.get(pk=run.pk), PXN)
        assert tables() == before
        assert 0 < live.stats["matrices_read"] - read_before <= len(before[0]) + len(before[1])
        settled = settled_answer()
        same_views(second, settled)
        same_views(live.snapshot(Run.objects.get(pk=run.pk), PXN), settled)  # (settling changes no byte)
        assert settled.views["projected"].verdict == "show"
    finally:
        redis_client.delete(keys.frames(fabric_name))
