"""``live_window.async_metric_since``: a heatmap's opening window reads one metric of each frame,
cut inside a real Redis, across several script calls — values, layout and the frame's metric names
as stored; a frame without the metric and an unreadable entry as the old whole-frame read had them."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import redis.asyncio as aioredis

from fabricmon.base import keys
from fabricmon.core.telemetry.frames import METRICS, Frame
from fabricmon.telemetry import live_window

pytestmark = pytest.mark.integration
PORTS = 300
FRAMES = 2 * live_window.PORT_CUT_CHUNK + 5  # three script calls


def test_one_metric_of_every_frame_is_cut_in_redis(redis_client, redis_url, fabric_name) -> None:
    rng = np.random.default_rng(7)
    key = keys.frames(fabric_name)
    sent = []
    for i in range(FRAMES):
        names = [m for m in METRICS if not (i == 3 and m == "util")]  # frame 3 has no util
        metrics = {m: rng.random(PORTS, dtype=np.float32) for m in names}
        sent.append(metrics)
        live_window.append(redis_client, Frame(fabric_name, "v7", 10**18 + i * 10**9, 1.0, metrics),
                           max_frames=1000)
        if i == 10:
            redis_client.xadd(key, {live_window.FIELD: b"FMF1garbage"})

    async def read() -> list[live_window.MetricCut]:
        r = aioredis.Redis.from_url(redis_url)
        try:
            return await live_window.async_metric_since(r, fabric_name, 0, "util")
        finally:
            await r.aclose()

    try:
        cuts = asyncio.run(read())
    finally:
        redis_client.delete(key)
    assert len(cuts) == FRAMES  # the garbage entry skipped
    ids = [tuple(map(int, c.eid.split(b"-"))) for c in cuts]
    assert ids == sorted(set(ids))  # each entry once, oldest first
    for i, (cut, metrics) in enumerate(zip(cuts, sent, strict=True)):
        assert cut.n_ports == PORTS and cut.metrics == tuple(metrics)
        f = cut.frame
        assert (f.ts_ns, f.topology_version, f.interval_s) == (10**18 + i * 10**9, "v7", 1.0)
        if i == 3:
            assert cut.frame.metrics == {}
        else:
            assert list(cut.frame.metrics) == ["util"]
            np.testing.assert_array_equal(cut.frame.metrics["util"], metrics["util"])
