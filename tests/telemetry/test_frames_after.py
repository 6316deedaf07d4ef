"""``live_window.frames_after``: the minute's history row reads the frames of its minute from the
stream IDs near that time on, not the whole 600-frame window (~480 MB at 16,896 ports), in a real
Redis stream."""

from __future__ import annotations

import numpy as np
import pytest

from fabricmon.base import keys
from fabricmon.core.telemetry.frames import Frame
from fabricmon.telemetry import live_window

pytestmark = pytest.mark.integration
S = 10**9


def _frame(fabric: str, ts_ns: int) -> bytes:
    return Frame(fabric, "v1", ts_ns, 1.0, {"util": np.full(4, 0.5, np.float32)}).encode()


def test_frames_after_reads_from_the_ids_near_its_time_on(redis_client, fabric_name) -> None:
    key = keys.frames(fabric_name)
    t0_ms = 1_790_000_000_000
    start = (t0_ms + 539 * 1000) * 10**6  # the history row of the minute after frame 539
    add = lambda frame, eid: redis_client.xadd(key, {live_window.FIELD: frame}, id=eid)  # noqa: E731
    try:
        # far older than the slack: never read, whatever it claims
        add(_frame(fabric_name, start + S), f"{t0_ms - 1000}-0")
        for i in range(600):  # a 600 s window, each frame appended 300 ms after its interval ended
            add(_frame(fabric_name, (t0_ms + i * 1000) * 10**6), f"{t0_ms + i * 1000 + 300}-0")
            if i == 509:  # appended 30 s before its time (a Redis clock behind the framer's): read
                add(_frame(fabric_name, start + S // 2), f"{t0_ms + i * 1000 + 300}-5")
        add(b"garbage", f"{t0_ms + 599 * 1000 + 900}-0")  # unreadable: skipped
        got = live_window.frames_after(redis_client, fabric_name, start, count=700)
        expected = [start + S // 2] + [(t0_ms + i * 1000) * 10**6 for i in range(540, 600)]
        assert sorted(f.ts_ns for f in got) == sorted(expected)
        # count bounds the entries read (from the slack on): 80 reach frame 559
        assert len(live_window.frames_after(redis_client, fabric_name, start, count=82)) == 21
    finally:
        redis_client.delete(key)
