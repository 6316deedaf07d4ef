"""The phase views' copy of a fabric's live window keeps only what they read (in and out bit/s),
each array its own: a web process that kept whole decoded frames held every metric of every port
for the whole window (~400 MB at 16,896 ports) — and a decoded frame's arrays are views of its
blob, so keeping one metric that way would still keep them all."""

from __future__ import annotations

import numpy as np
import pytest

from fabricmon.base import keys
from fabricmon.core.telemetry.frames import METRICS, Frame
from fabricmon.phases import counters
from fabricmon.telemetry import live_window

pytestmark = pytest.mark.integration
PORTS = 1000


def test_kept_frames_hold_in_and_out_only_in_arrays_of_their_own(redis_client, fabric_name) -> None:
    t0 = 1_800_000_000 * 10**9
    rng = np.random.default_rng(1)
    sent = []
    for i in range(1, 6):
        metrics = {m: rng.random(PORTS, dtype=np.float32) * 1e9 for m in METRICS}
        sent.append(metrics)
        live_window.append(redis_client, Frame(fabric_name, "v1", t0 + i * 10**9, 1.0, metrics), max_frames=100)
    try:
        kept = counters.frames_of(fabric_name)
        kept.update(fabric_name)
        assert len(kept.frames) == 5
        for frame, metrics in zip(kept.frames, sent, strict=True):
            assert sorted(frame.metrics) == ["in_bps", "out_bps"]
            for m in ("in_bps", "out_bps"):
                arr = frame.metrics[m]
                assert arr.base is None and arr.nbytes == 4 * PORTS  # not a view of the 11-metric blob
                np.testing.assert_array_equal(arr, metrics[m])
        edges, m_in, m_out = counters.measured_bytes(fabric_name, t0, t0 + 10 * 10**9)
        assert len(edges) == 6
        np.testing.assert_allclose(m_in[2], sent[2]["in_bps"].astype(np.float64) / 8, rtol=1e-6)
        np.testing.assert_allclose(m_out[4], sent[4]["out_bps"].astype(np.float64) / 8, rtol=1e-6)
    finally:
        redis_client.delete(keys.frames(fabric_name))
