"""Downsampling frames for the history: NaN ignored, the peak utilisation kept."""

from __future__ import annotations

import numpy as np
import pytest

from fabricmon.core.telemetry.downsample import downsample
from fabricmon.core.telemetry.frames import Frame


def test_downsample_means_ignore_nan_and_keep_util_max() -> None:
    def frame(ts: int, util: list[float]) -> Frame:
        u = np.asarray(util, dtype=np.float32)
        return Frame("f", "v1", ts, 1.0, {"util": u, "in_bps": u * 100})

    out = downsample([frame(1, [0.2, np.nan, np.nan]), frame(2, [0.4, 0.5, np.nan])], end_ns=2, step_s=2.0)
    np.testing.assert_allclose(out.metrics["util"][:2], [0.3, 0.5], rtol=1e-6)
    np.testing.assert_allclose(out.metrics["util_max"][:2], [0.4, 0.5], rtol=1e-6)
    assert np.isnan(out.metrics["util"][2]) and np.isnan(out.metrics["util_max"][2])
    assert out.interval_s == 2.0 and out.topology_version == "v1"
    assert Frame.decode(out.encode()).metrics.keys() == out.metrics.keys()
    with pytest.raises(ValueError, match="at least one frame"):
        downsample([], end_ns=0, step_s=1.0)
