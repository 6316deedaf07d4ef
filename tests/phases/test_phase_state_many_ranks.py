"""The phase views of a run of many ranks project each traffic matrix from its nonzero cells, one
at a time (a (K, R, R) stack was 127 MB a key at 5,632 ranks): on a reported twin run, forcing that
path gives the views the dense path gives — verdicts, columns, gates and load bytes."""

from __future__ import annotations

import numpy as np
import pytest
from phase_twin import recording, write_counters
from test_phase_state import post

from collectors.probe import IngestClient
from fabricmon.base import keys
from fabricmon.jobs import runs
from fabricmon.jobs.models import Run
from fabricmon.jobs.tokens import issue_token
from fabricmon.phases import state
from fabricmon.phases.state import PXN, RunPhaseState

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


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
        assert dense.error is None and cells.error is None and set(dense.views) == set(cells.views)
        assert dense.views["projected"].verdict == "show"
        for name, v in dense.views.items():
            w = cells.views[name]
            assert (v.verdict, v.columns, [g.reason for g in v.gates]) == (
                w.verdict, w.columns, [g.reason for g in w.gates]), name
            if v.load_bytes is None:
                assert w.load_bytes is None, name
            else:  # (the dense path sums in float32, the cells in float64)
                np.testing.assert_allclose(w.load_bytes, v.load_bytes, rtol=1e-5, atol=1.0)
    finally:
        redis_client.delete(keys.frames(fabric_name))
