"""The scale bench's frame recording (bench/frame_recording.py) against a real Redis live window:
what detection read is what a replay reads back, frame for frame, NaN where a frame had no data."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from frame_recording import FrameRecorder, load

from fabricmon.core.telemetry.frames import Frame
from fabricmon.telemetry import live_window


def _frame(fabric: str, ts: int, metrics: dict[str, np.ndarray], version: str = "v1") -> Frame:
    return Frame(fabric=fabric, topology_version=version, ts_ns=ts, interval_s=1.0, metrics=metrics)


def test_recording_round_trip(redis_client, tmp_path: Path) -> None:
    fabric = f"rec-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(1)
    sent = []
    try:
        for i in range(5):
            m = {"out_bps": rng.random(6, dtype=np.float32), "watermark_bytes": rng.random(6, dtype=np.float32)}
            if i == 2:
                del m["watermark_bytes"]  # an SNMP-only tick: no queue telemetry
            sent.append(m)
            live_window.append(redis_client, _frame(fabric, (i + 1) * 10**9, m), max_frames=100)
        rec = FrameRecorder(redis_client, fabric)
        assert rec.drain(chunk=2) == 5  # chunks shorter than the stream: it reads on from its cursor
        live_window.append(redis_client, _frame(fabric, 6 * 10**9, sent[0]), max_frames=100)
        live_window.append(redis_client, _frame(fabric, 7 * 10**9, sent[0], version="v2"), max_frames=100)
        assert rec.drain() == 2  # only what came since; the other topology version is left out
        rec.save(tmp_path / "frames.npz")
    finally:
        live_window.forget(redis_client, fabric)
    ts, metrics = load(tmp_path / "frames.npz")
    assert ts.tolist() == [i * 10**9 for i in range(1, 7)]
    assert set(metrics) == {"out_bps", "watermark_bytes"}  # metrics no frame had are not kept
    assert metrics["out_bps"].shape == (6, 6)
    np.testing.assert_array_equal(metrics["out_bps"][:5], np.stack([m["out_bps"] for m in sent]))
    assert np.isnan(metrics["watermark_bytes"][2]).all()
    np.testing.assert_array_equal(metrics["watermark_bytes"][3], sent[3]["watermark_bytes"])
