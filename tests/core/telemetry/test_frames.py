import numpy as np
import pytest

from fabricmon.core.telemetry.frames import Frame, FrameFormatError


def make_frame(n: int = 5) -> Frame:
    util = np.linspace(0, 1, n, dtype=np.float32)
    util[2] = np.nan
    return Frame("f1", "abc123", 1_700_000_000_000_000_000, 1.0, {"util": util, "in_bps": util * 4e11})


def test_round_trip_keeps_values_and_nan() -> None:
    frame = make_frame()
    back = Frame.decode(frame.encode())
    assert back.fabric == "f1" and back.topology_version == "abc123" and back.ts_ns == frame.ts_ns
    np.testing.assert_array_equal(back.metrics["util"], frame.metrics["util"])
    assert np.isnan(back.metrics["in_bps"][2])


@pytest.mark.parametrize("cut", [0, 3, 9, -1])
def test_truncated_or_foreign_bytes_are_rejected(cut: int) -> None:
    blob = make_frame().encode()
    with pytest.raises(FrameFormatError):
        Frame.decode(blob[:cut])


def test_mismatched_metric_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="shape"):
        Frame("f", "v", 0, 1.0, {"a": np.zeros(3, np.float32), "b": np.zeros(4, np.float32)}).encode()
