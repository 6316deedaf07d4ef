"""The moving-incast rule's memory of lately hot ports survives the evaluation task's round trip
through Redis (each window is evaluated by whichever worker runs it), stays sparse, and a state
saved before the memory existed loads as "nothing hot lately"."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fabricmon.alerts import evaluation
from fabricmon.base import keys
from fabricmon.core.detection.config import DetectConfig
from fabricmon.core.detection.geometry import fabric_geometry
from fabricmon.core.detection.window import NEVER, MovingState, detect_window
from fabricmon.core.topology.port_index import build_port_index
from tests.topologies import two_leaf_two_spine

pytestmark = pytest.mark.integration


def test_recent_hot_ports_round_trip_through_redis(redis_client, fabric_name) -> None:
    fabric = two_leaf_two_spine("small", servers=4)
    geo = fabric_geometry(build_port_index(fabric), fabric)
    host = np.flatnonzero(geo.is_leaf_host)
    state = MovingState.initial(geo.n_ports)
    for hot in ([host[0]], [host[1]], [host[2]]):
        util = np.where(geo.is_leaf_host, 0.3, 0.0).astype(np.float32)
        wm = np.full(geo.n_ports, 0.0, np.float32)
        util[hot], wm[hot] = 0.97, 5e6
        state, _ = detect_window({"util": util, "watermark_bytes": wm}, geo, state, DetectConfig(),
                                 fan_in=np.where(geo.is_leaf_host, 31.0, 0).astype(np.float32))
    try:
        evaluation._save_state(redis_client, fabric_name, geo, state)
        saved = json.loads(redis_client.get(keys.alerts_state(fabric_name)))
        assert sorted(saved["recent"]) == sorted(host[:3].tolist())  # sparse: the lately hot only
        loaded = evaluation._load_state(redis_client, fabric_name, geo)
        np.testing.assert_array_equal(loaded.hot_age, state.hot_age)
        assert loaded.hot_age[host[2]] == 0 and loaded.hot_age[host[0]] == 2 and loaded.hot_age[host[3]] == NEVER
        # a state saved by the version before: no memory, nothing lately hot
        del saved["recent"], saved["recent_age"]
        redis_client.set(keys.alerts_state(fabric_name), json.dumps(saved))
        old = evaluation._load_state(redis_client, fabric_name, geo)
        assert (old.hot_age == NEVER).all() and old.prev_hot[host[2]]
    finally:
        redis_client.delete(keys.alerts_state(fabric_name))
