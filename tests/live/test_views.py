"""Pages and JSON of the live app with Django's test client: login and roles, layout, port series,
switch health, plotly.js served locally. Real Redis for frames and health."""

from __future__ import annotations

import time

import numpy as np
import pytest
from django.contrib.auth.models import Group, User

from fabricmon.base import keys
from fabricmon.core.telemetry.frames import Frame
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.telemetry import leases, live_window
from fabricmon.topology.services import import_fabric
from tests.topologies import two_leaf_two_spine

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


@pytest.fixture
def fabric(fabric_name, redis_client):
    spec = two_leaf_two_spine(fabric_name, servers=4)
    import_fabric(spec)
    yield spec
    redis_client.delete(keys.frames(fabric_name), keys.health(fabric_name))


def login(client, role: str | None = "operators") -> None:
    user = User.objects.create_user(f"u-{role}", password="pw-not-secret")
    if role:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    client.force_login(user)


def test_pages_need_login_then_a_role(client, fabric) -> None:
    url = f"/fabric/{fabric.name}/"
    assert client.get(url).status_code == 302
    login(client, role=None)
    assert client.get(url).status_code == 403


def test_index_goes_straight_to_the_only_fabric_or_lists_them(client, fabric) -> None:
    login(client)
    resp = client.get("/")  # live frames of other tests' fabrics in Redis do not count
    assert resp.status_code == 302 and resp.url == f"/fabric/{fabric.name}/"
    import_fabric(rail_optimized(f"{fabric.name}b", servers=2, gpus_per_server=2, spines=1))
    resp = client.get("/")
    assert resp.status_code == 200 and resp.context["fabrics"] == [fabric.name, f"{fabric.name}b"]


def test_layout_has_one_row_per_port_with_peers_and_an_etag(client, fabric) -> None:
    login(client)
    resp = client.get(f"/fabric/{fabric.name}/layout.json")
    layout = resp.json()
    index = build_port_index(fabric)
    assert layout["n_ports"] == len(index) and layout["topology_version"] == index.version
    pos = index.position("leaf-r1", 3)
    assert layout["ports"]["peer"][pos] == "node003 gpu1 mlx5_1"
    again = client.get(f"/fabric/{fabric.name}/layout.json", headers={"if-none-match": resp["ETag"]})
    assert again.status_code == 304
    assert client.get("/fabric/no-such-fabric/layout.json").status_code == 404


def test_port_series_keeps_gaps_and_names_switch_health(client, fabric, redis_client) -> None:
    login(client)
    index = build_port_index(fabric)
    pos = index.position("leaf-r0", 2)
    now = time.time_ns()
    for i, v in enumerate([0.25, np.nan, 0.75]):
        util = np.zeros(len(index), dtype=np.float32)
        util[pos] = v
        live_window.append(redis_client, Frame(fabric.name, index.version, now - (3 - i) * 10**9, 1.0, {"util": util}),
                           max_frames=100)
    live_window.write_health(redis_client, fabric.name, "leaf-r0",
                             {"up": True, "last_success_ns": now, "poll_ms": 12.5, "errors": 0, "interval_s": 1.0})
    data = client.get(f"/fabric/{fabric.name}/port/{pos}.json?switch=leaf-r0").json()
    assert data["metrics"]["util"] == [0.25, None, 0.75]
    assert data["health"]["state"] == "up" and data["health"]["poll_ms"] == 12.5
    page = client.get(f"/fabric/{fabric.name}/port/{pos}/")
    assert page.context["port"]["peer"] == "node002 gpu0 mlx5_0"
    assert client.get(f"/fabric/{fabric.name}/port/{len(index)}/").status_code == 404
    for bad in ("abc", "nan", "inf", "-5", "0"):  # each a 400 naming the field, never a 500
        resp = client.get(f"/fabric/{fabric.name}/port/{pos}.json", {"window_s": bad})
        assert resp.status_code == 400 and resp.json()["field"] == "window_s", bad
    assert client.get(f"/fabric/{fabric.name}/port/{pos}.json", {"window_s": "1e9"}).status_code == 200


def test_a_ports_window_is_cut_in_redis_and_equals_reading_the_whole_frames(fabric, redis_client) -> None:
    """port.json reads 4 bytes a metric a frame, cut inside Redis (a 16,896-port fabric's whole
    window was ~480 MB to read for one port): over more frames than a script call takes, with
    gaps, metrics that come and go, a frame of an older port layout and an entry that is no frame,
    it answers what decoding every whole frame answers."""
    from fabricmon.live import services

    index = build_port_index(fabric)
    n, rng = len(index), np.random.default_rng(3)
    now = time.time_ns()
    count = 2 * live_window.PORT_CUT_CHUNK + 7
    for i in range(count):
        metrics = {"util": rng.random(n, dtype=np.float32), "in_bps": rng.random(n, dtype=np.float32) * 4e11}
        metrics["util"][rng.random(n) < 0.2] = np.nan
        if i % 3 == 0:
            metrics["watermark_bytes"] = rng.random(n, dtype=np.float32) * 1e6
        version = "old-layout" if i == 5 else index.version
        live_window.append(redis_client, Frame(fabric.name, version, now - (count - i) * 10**9, 1.0, metrics),
                           max_frames=1000)
        if i == 9:
            redis_client.xadd(keys.frames(fabric.name), {live_window.FIELD: b"not a frame"})
    pos = index.position("leaf-r1", 3)
    got = services.port_series(redis_client, fabric.name, pos, 300.0)
    whole = []  # the old path: every whole frame decoded
    for _eid, fields in redis_client.xrange(keys.frames(fabric.name)):
        try:
            whole.append(Frame.decode(bytes(fields[live_window.FIELD])))
        except ValueError:
            continue
    whole = [f for f in whole if f.topology_version == index.version]
    assert got["ts_ms"] == [f.ts_ns / 1e6 for f in whole] and len(whole) == count - 1
    for name in ("util", "in_bps", "watermark_bytes"):
        want = [float(f.metrics[name][pos]) if name in f.metrics else float("nan") for f in whole]
        assert got["metrics"][name] == [None if np.isnan(v) else v for v in want], name
    short = services.port_series(redis_client, fabric.name, pos, 10.0)  # the window's frames only
    assert short["ts_ms"] == got["ts_ms"][-10:]


def test_switch_health_states(client, fabric, redis_client) -> None:
    login(client)
    now = time.time_ns()
    live_window.write_health(redis_client, fabric.name, "leaf-r0", {"up": True, "last_success_ns": now, "errors": 0})
    live_window.write_health(redis_client, fabric.name, "leaf-r1",
                             {"up": False, "last_success_ns": now - 60 * 10**9, "errors": 7, "last_error": "timeout"})
    live_window.write_health(redis_client, fabric.name, "spine0", {"up": True, "last_success_ns": now - 60 * 10**9})
    rows = {r["switch"]: r for r in client.get(f"/fabric/{fabric.name}/health.json").json()["switches"]}
    assert rows["leaf-r0"]["state"] == "up"
    assert rows["leaf-r1"]["state"] == "down" and rows["leaf-r1"]["last_error"] == "timeout"
    assert rows["spine0"]["state"] == "stale"
    assert rows["spine1"]["state"] == "never polled"


def test_plotly_is_served_locally(client) -> None:
    resp = client.get("/static/vendor/plotly.min.js")
    assert resp.status_code == 200
    assert b"plotly" in b"".join(resp.streaming_content)[:2000].lower()


def test_switch_health_says_who_polls_how_and_counts_the_errors_it_names(client, fabric, redis_client) -> None:
    """The errors count agrees with the last error: a switch that timed out 3 times and recovered
    shows 3 errors (failing for 0 polls now), not "0" beside "timeout"; the lease is asked of Redis."""
    login(client)
    now = time.time_ns()
    shard = f"{fabric.name}-0"
    lease = leases.Lease.acquire(redis_client, shard, 5.0)
    assert lease is not None
    try:
        collector = {"process": "node9:4242", "shard": shard, "lease": lease.token, "lease_ttl_s": 5.0}
        base = {"up": True, "last_success_ns": now, "last_poll_ns": now, "poll_ms": 11.0, "interval_s": 1.0,
                "shard": shard, "collector": collector, "polls": 120}
        live_window.write_health(redis_client, fabric.name, "leaf-r0", base | {
            "errors": 0, "consecutive_failures": 0, "error_counts": {"timeout": 3},
            "last_error": "timeout", "last_error_ns": now - 30 * 10**9})
        live_window.write_health(redis_client, fabric.name, "leaf-r1", base | {
            "up": False, "errors": 2, "consecutive_failures": 2, "error_counts": {"timeout": 1, "malformed": 1},
            "last_error": "malformed: bad BER", "last_error_ns": now,
            "collector": collector | {"lease": "someone-before"}})
        rows = {r["switch"]: r for r in client.get(f"/fabric/{fabric.name}/health.json").json()["switches"]}
        ok, failing = rows["leaf-r0"], rows["leaf-r1"]
        assert (ok["errors_total"], ok["failing_for"], ok["last_error"]) == (3, 0, "timeout")
        assert 29 < ok["last_error_age_s"] < 60
        assert (failing["errors_total"], failing["failing_for"]) == (2, 2)
        assert ok["protocol"] == "SNMP v2c" and rows["spine1"]["protocol"] == "SNMP v2c"
        assert ok["lease"]["state"] == "held" and 0 < ok["lease"]["expires_in_s"] <= 5.0
        assert ok["lease"]["standby"] is False
        assert failing["lease"]["state"] == "taken"  # written by a holder that no longer holds the shard
        lease.release()
        rows = {r["switch"]: r for r in client.get(f"/fabric/{fabric.name}/health.json").json()["switches"]}
        assert rows["leaf-r0"]["lease"]["state"] == "free"
    finally:
        lease.release()
