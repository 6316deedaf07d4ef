"""From the live window (real Redis) to alert rows: frames of a moving hot port → one moving-incast
alert; a second run picks up where the first stopped (cursor + moving state in Redis)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fabricmon.alerts.evaluation import evaluate_fabric, geometry
from fabricmon.alerts.models import Alert, Episode
from fabricmon.base import keys
from fabricmon.core.detection.config import DetectConfig
from fabricmon.core.telemetry.frames import Frame
from fabricmon.telemetry import live_window
from fabricmon.topology import services as topology
from tests.topologies import two_leaf_two_spine

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
KMAX = DetectConfig().watermark_kmax_bytes
T0_NS = 1_767_225_600 * 10**9


def test_frames_in_redis_raise_a_moving_incast(redis_client, fabric_name) -> None:
    topology.import_fabric(two_leaf_two_spine(fabric_name, servers=4))
    geo = geometry(fabric_name)
    host = np.flatnonzero(geo.is_leaf_host)
    try:

        def push(t: int, hot: list[int], topo: str | None = None) -> None:
            util = np.where(geo.is_leaf_host, 0.3, 0.0).astype(np.float32)
            wm = np.full(geo.n_ports, 0.1 * KMAX, np.float32)
            util[hot], wm[hot] = 0.97, 3 * KMAX
            live_window.append(
                redis_client,
                Frame(
                    fabric_name,
                    topo or geo.index.version,
                    T0_NS + t * 10**9,
                    1.0,
                    {"util": util, "watermark_bytes": wm},
                ),
                max_frames=100,
            )

        for t, hot in enumerate([[host[0]], [host[0]], [host[5]]]):
            push(t, hot)
        push(3, [host[1]], topo="stale-version")  # skipped, named in the log
        assert evaluate_fabric(fabric_name, redis_client) == 3
        assert Alert.objects.get(kind="incast").state == "firing"
        for t, hot in enumerate([[host[2]], [host[7]]], start=4):
            push(t, hot)
        assert evaluate_fabric(fabric_name, redis_client) == 2  # only the new frames
        moving = Alert.objects.get(kind="moving_incast")
        assert moving.state == "firing" and moving.details["fan_in_known"] is False
        ep = Episode.objects.get(fabric=fabric_name)
        assert ep.migrations == 3 and len(ep.trajectory) == 4
        # the job between steps (every port idle): the hot set is carried over the quiet windows,
        # across evaluations (the state in Redis), and the next step's hotspot moved from it
        for t in (6, 7, 8, 9):
            util = np.zeros(geo.n_ports, np.float32)
            live_window.append(redis_client, Frame(fabric_name, geo.index.version, T0_NS + t * 10**9, 1.0,
                                                   {"util": util, "watermark_bytes": util}), max_frames=100)
            assert evaluate_fabric(fabric_name, redis_client) == 1
        saved = json.loads(redis_client.get(keys.alerts_state(fabric_name)))
        assert (saved["hot"], saved["quiet"], saved["gap"]) == ([int(host[7])], 4, 0)
        push(10, [host[3]])
        assert evaluate_fabric(fabric_name, redis_client) == 1
        assert Episode.objects.get(fabric=fabric_name).migrations == 4
    finally:
        redis_client.delete(
            keys.frames(fabric_name), keys.alerts_cursor(fabric_name), keys.alerts_state(fabric_name)
        )


def test_one_evaluation_per_fabric_at_a_time(redis_client, fabric_name) -> None:
    """Beats overlap, and queued runs all start together when Redis comes back: while one run holds
    the fabric's lock another reads nothing (no frame recorded twice, no doubled trajectory step);
    a lock left by a killed worker expires after its TTL and evaluation goes on."""
    import time

    topology.import_fabric(two_leaf_two_spine(fabric_name, servers=4))
    geo = geometry(fabric_name)
    host = np.flatnonzero(geo.is_leaf_host)
    other = redis_client.lock(keys.alerts_lock(fabric_name), timeout=0.5, blocking=False)
    try:
        for t, hot in enumerate([[host[0]], [host[0]], [host[5]], [host[2]]]):
            util = np.where(geo.is_leaf_host, 0.3, 0.0).astype(np.float32)
            wm = np.full(geo.n_ports, 0.1 * KMAX, np.float32)
            util[hot], wm[hot] = 0.97, 3 * KMAX
            live_window.append(redis_client, Frame(fabric_name, geo.index.version, T0_NS + t * 10**9, 1.0,
                                                   {"util": util, "watermark_bytes": wm}), max_frames=100)
        assert other.acquire()  # another worker is evaluating this fabric (and then dies, never releasing)
        assert evaluate_fabric(fabric_name, redis_client) == 0
        assert redis_client.get(keys.alerts_cursor(fabric_name)) is None and not Alert.objects.exists()
        time.sleep(0.6)  # its lock expires
        assert evaluate_fabric(fabric_name, redis_client) == 4
        assert evaluate_fabric(fabric_name, redis_client) == 0  # nothing new, and the lock was released
        assert not redis_client.exists(keys.alerts_lock(fabric_name))
        steps = [s["ts_ns"] for s in Episode.objects.get(fabric=fabric_name).trajectory]
        assert len(steps) == len(set(steps)) == 3, steps
    finally:
        redis_client.delete(keys.frames(fabric_name), keys.alerts_cursor(fabric_name),
                            keys.alerts_state(fabric_name), keys.alerts_lock(fabric_name))


def test_redis_gone_is_one_line_and_the_next_beat_goes_on(fabric_name, settings, caplog) -> None:
    """Redis restarting under the beat: ``alerts.evaluate`` logs one line naming the fabric, not a
    task traceback, and returns (nothing evaluated)."""
    import socket

    from fabricmon.alerts.evaluation import evaluate_all

    topology.import_fabric(two_leaf_two_spine(fabric_name, servers=4))
    with socket.socket() as s:  # a port nothing listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    with caplog.at_level("WARNING", logger="fabricmon.alerts.evaluation"):
        assert evaluate_all() == 0
    said = [r.getMessage() for r in caplog.records]
    assert any(fabric_name in m and "Redis unreachable" in m for m in said), said


def test_a_stalled_collector_shard_is_one_target_down_across_beats(redis_client, fabric_name, settings) -> None:
    """The shards detection groups by are the collectors' own (``FABRICMON_SHARD_SIZE``), and a
    roll-up's hold survives between beats (the Redis state): a shard whose switches come back
    staggered stays one alert across evaluations, never per-switch alerts for the stragglers."""
    from tests.topologies import one_su_256_gpus

    settings.FABRICMON_SHARD_SIZE = 4  # shard :1 is leaf-r4 … leaf-r7
    topology.import_fabric(one_su_256_gpus(fabric_name))
    geo = geometry(fabric_name)
    names = geo.index.switch_names
    t = iter(range(1000))

    def push(silent: list[str], windows: int) -> None:
        for _ in range(windows):
            util = np.where(geo.is_leaf_host, 0.3, 0.0).astype(np.float32)
            util[np.isin(geo.index.switch_of, [names.index(n) for n in silent])] = np.nan
            live_window.append(redis_client, Frame(fabric_name, geo.index.version, T0_NS + next(t) * 10**9,
                                                   1.0, {"util": util}), max_frames=100)
        assert evaluate_fabric(fabric_name, redis_client) == windows  # one beat

    def down() -> list[tuple[str, str]]:
        return sorted(Alert.objects.filter(fabric=fabric_name, kind="target_down")
                      .values_list("key", "state"))

    try:
        push(["leaf-r4", "leaf-r5", "leaf-r6", "leaf-r7"], 6)
        assert down() == [(f"shard {fabric_name}:1", "firing")]
        push(["leaf-r4", "leaf-r5"], 4)  # two back; two still silent: the same stall, held
        assert down() == [(f"shard {fabric_name}:1", "firing")]
        push(["leaf-r4"], 4)  # one left, below the hold: the stall's tail (its members are in Redis)
        assert down() == [(f"shard {fabric_name}:1", "firing")]
        push([], 12)  # all back: it resolves after keep_firing
        assert down() == [(f"shard {fabric_name}:1", "resolved")]
    finally:
        redis_client.delete(keys.frames(fabric_name), keys.alerts_cursor(fabric_name), keys.alerts_state(fabric_name))


def test_a_switch_heard_from_after_its_frame_was_built_is_late_not_down(redis_client, fabric_name) -> None:
    """A switch whose samples reach its collector after their frames were built misses frames
    while it is up: that is a late cell, not an outage. A switch its collector heard from
    within the down span is late (its health counts the late polls), not down; one not heard from is
    down; and a "heard" time ahead of our clock (a switch's own clock) is not trusted."""
    import time

    topology.import_fabric(two_leaf_two_spine(fabric_name, servers=4))
    geo = geometry(fabric_name)
    names = geo.index.switch_names
    now = time.time_ns() - 20 * 10**9
    try:
        for t in range(8):  # spine0, spine1 and leaf-r1 have no cells in any frame
            util = np.where(geo.is_leaf_host, 0.3, 0.0).astype(np.float32)
            util[np.isin(geo.index.switch_of, [names.index(n) for n in ("spine0", "spine1", "leaf-r1")])] = np.nan
            live_window.append(redis_client, Frame(fabric_name, geo.index.version, now + t * 10**9, 1.0,
                                                   {"util": util}), max_frames=100)
        late = now + 7 * 10**9  # its newest sample arrived after the last frame was built
        live_window.write_health(redis_client, fabric_name, "spine0", {"up": True, "last_success_ns": late})
        live_window.write_health(redis_client, fabric_name, "spine1", {"up": True, "last_success_ns": now - 10**9})
        ahead = time.time_ns() + 3600 * 10**9  # a dead switch whose clock runs an hour ahead
        live_window.write_health(redis_client, fabric_name, "leaf-r1", {"up": True, "last_success_ns": ahead})
        # spine0's sample at +7 s falls within every frame's down span (3 windows back from it)
        assert evaluate_fabric(fabric_name, redis_client) == 8
        fired = sorted(Alert.objects.filter(fabric=fabric_name, kind="target_down").values_list("key", flat=True))
        assert fired == ["leaf-r1", "spine1"]
    finally:
        redis_client.delete(keys.frames(fabric_name), keys.alerts_cursor(fabric_name),
                            keys.alerts_state(fabric_name), keys.health(fabric_name))


def test_a_move_awaiting_confirmation_is_kept_across_evaluations(redis_client, fabric_name) -> None:
    """A move seen in one window and confirmed in the next, each frame evaluated by its own run
    (as the beat does): the candidate is in the Redis state between them, and the episode's
    trajectory steps to the new ports at the window they were first seen."""
    topology.import_fabric(two_leaf_two_spine(fabric_name, servers=4))
    geo = geometry(fabric_name)
    host = np.flatnonzero(geo.is_leaf_host)
    a, b, c = int(host[0]), int(host[5]), int(host[6])
    try:
        for t, hot in enumerate([[a], [a], [a, b, c], [b, c]]):
            util = np.where(geo.is_leaf_host, 0.3, 0.0).astype(np.float32)
            wm = np.full(geo.n_ports, 0.1 * KMAX, np.float32)
            util[hot], wm[hot] = 0.97, 3 * KMAX
            live_window.append(redis_client, Frame(fabric_name, geo.index.version, T0_NS + t * 10**9, 1.0,
                                                   {"util": util, "watermark_bytes": wm}), max_frames=100)
            assert evaluate_fabric(fabric_name, redis_client) == 1
            saved = json.loads(redis_client.get(keys.alerts_state(fabric_name)))
            if t == 2:  # the candidate, and the hot set it left still the one judged against
                assert (saved["pending"], saved["pending_ts"], saved["hot"]) == ([b, c], T0_NS + 2 * 10**9, [a])
        assert saved["pending"] == [] and saved["hot"] == [b, c]
        ep = Episode.objects.get(fabric=fabric_name)
        assert ep.migrations == 1
        assert (ep.trajectory[-1]["ts_ns"], len(ep.trajectory[-1]["ports"])) == (T0_NS + 2 * 10**9, 2)
        assert ep.trajectory[-2]["ts_ns"] <= T0_NS + 1 * 10**9  # where it came from: port a
    finally:
        redis_client.delete(
            keys.frames(fabric_name), keys.alerts_cursor(fabric_name), keys.alerts_state(fabric_name)
        )
