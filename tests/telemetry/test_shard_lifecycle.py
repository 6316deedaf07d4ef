"""Shard lifecycle against the twin process: malformed agents, lease takeover, frames + history,
and the status command.

    twin process ◀─UDP─ run_shard (thread) ──▶ Redis (frames, health, leases) ──▶ DB (HistoryFrame)
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import replace
from io import StringIO

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from telemetry_harness import INTERVAL_S, collector_spec, run_collectors

from fabricmon.base import keys
from fabricmon.telemetry import live_window
from fabricmon.telemetry.framing import FabricFramer
from fabricmon.telemetry.leases import Lease, Standby, holder, standby
from fabricmon.telemetry.models import HistoryFrame
from fabricmon.telemetry.services import ensure_collectors, fabric_status, run_shard, shard_started
from fabricmon.topology.services import import_fabric
from tests.topologies import two_leaf_one_spine, two_leaf_two_spine

pytestmark = pytest.mark.integration


def _wait_for(predicate, timeout_s: float, step_s: float = 0.1) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step_s)
    return predicate()


class GarbageAgent:
    """A UDP "agent" on 127.0.0.1:0 that answers every request with bytes that are not SNMP."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.answered = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                _data, addr = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            self.sock.sendto(b"\x30\x82\xff\xffnot-snmp" + bytes(range(40)), addr)
            self.answered += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


def test_malformed_responses_are_counted_and_polling_continues(twin_process, redis_url, redis_client,
                                                               settings) -> None:
    settings.FABRICMON_SHARD_SIZE = 6
    garbage = GarbageAgent()
    bad = "leaf-r2"
    base = collector_spec(twin_process.fabric)
    spec = replace(base, switches=tuple(
        replace(sw, snmp=replace(sw.snmp, port=garbage.port)) if sw.name == bad else sw
        for sw in base.switches))
    try:
        with run_collectors([spec], [f"{spec.name}:0"], redis_url) as c:
            assert _wait_for(lambda: len(c.by_switch().get(bad, [])) >= 5, 15)
    finally:
        garbage.close()
    assert garbage.answered >= 5
    bad_polls = c.by_switch()[bad]
    assert all(r.error_kind == "malformed" for r in bad_polls), {r.error_kind for r in bad_polls}
    health = live_window.read_health(redis_client, spec.name)
    assert health[bad]["up"] is False
    assert health[bad]["error_counts"]["malformed"] == len(bad_polls)
    assert "malformed" in health[bad]["last_error"]
    # when it happened: at the end of the last failed poll (the switches page says how long ago)
    assert health[bad]["last_poll_ns"] <= health[bad]["last_error_ns"] <= time.time_ns()
    # The loop kept polling everyone else, successfully.
    for switch, recs in c.by_switch().items():
        if switch != bad:
            assert len(recs) >= 5 and all(r.error_kind is None for r in recs[1:]), switch
            assert health[switch]["up"] is True and health[switch]["error_counts"] == {}


def test_a_held_shard_is_taken_over_within_one_lease_after_its_holder_dies(twin_process, redis_url,
                                                                          redis_client, settings) -> None:
    settings.FABRICMON_SHARD_SIZE = 6
    spec = collector_spec(twin_process.fabric)
    shard = f"{spec.name}:0"
    lease_s = 2.0
    # A collector that crashed leaves exactly this behind: a lease key nobody renews.
    dead = Lease.acquire(redis_client, shard, lease_s)
    assert dead is not None
    died_at = time.monotonic()
    assert run_shard(shard, lease_s=lease_s, fabrics=[spec], redis_url=redis_url, history=False).acquired is False

    taken_over = []
    stop = threading.Event()

    def second_runner() -> None:
        while not stop.is_set():  # what ensure_collectors + collect_shard do, without Celery
            report = run_shard(shard, lease_s=lease_s, run_s=4.0, fabrics=[spec], redis_url=redis_url,
                               stop_event=stop, history=False)
            if report.acquired:
                taken_over.append(report)
                return
            time.sleep(0.1)

    t = threading.Thread(target=second_runner)
    t.start()
    try:
        assert _wait_for(lambda: holder(redis_client, shard) not in (None, dead.token), lease_s + 1.5)
        took_s = time.monotonic() - died_at
        assert _wait_for(lambda: len(live_window.read_window(redis_client, spec.name)) >= 2, 6)
    finally:
        stop.set()
        t.join(15)
    assert took_s <= lease_s + 1.0
    assert not dead.renew()
    assert taken_over and taken_over[0].frames_built >= 2
    assert holder(redis_client, shard) is None  # handed back at the end


@pytest.mark.django_db(transaction=True)
def test_frames_once_per_tick_nan_for_a_dead_shard_and_history_rows(twin_process, redis_url, redis_client,
                                                                    settings) -> None:
    settings.FABRICMON_SHARD_SIZE = 3
    settings.FABRICMON_HISTORY_STEP_S = 2
    spec = collector_spec(twin_process.fabric)
    import_fabric(spec)  # the collector reads the topology from the database (fabrics=None)
    framer = FabricFramer(spec, window_s=60)
    # Only shard 0 runs: shard 1 is "dead", its switches must be NaN in every frame (deadline path).
    with run_collectors(None, [f"{spec.name}:0"], redis_url, history=True) as c:
        assert _wait_for(lambda: HistoryFrame.objects.filter(fabric__name=spec.name).count() >= 2, 15, 0.3)
    alive = {r.switch for r in c.records}
    assert len(alive) == 3
    frames = [f for _, f in live_window.read_window(redis_client, spec.name)]
    ticks = [f.ts_ns for f in frames]
    assert len(ticks) == len(set(ticks)) >= 4, "a tick was framed twice"
    assert all(np.diff(ticks) % round(INTERVAL_S * 1e9) == 0)
    for f in frames:
        for switch, sl in framer.slices.items():
            if switch not in alive:
                assert np.isnan(f.metrics["in_bps"][sl]).all()
    assert sum(np.isfinite(f.metrics["util"][framer.slices[s]]).all() for f in frames for s in alive) >= 6
    rows = list(HistoryFrame.objects.filter(fabric__name=spec.name).order_by("ts"))
    for row in rows:
        frame = row.frame()
        assert row.step_s == 2 and row.topology_version == framer.index.version
        assert row.n_samples >= 1 and row.n_samples <= 2 / INTERVAL_S
        assert {"in_bps", "util", "util_max"} <= set(frame.metrics)
        assert frame.n_ports == len(framer.index)
        with np.errstate(invalid="ignore"):
            assert (np.nan_to_num(frame.metrics["util_max"], nan=0) >= np.nan_to_num(frame.metrics["util"], nan=0)).all()
    assert len({row.ts for row in rows}) == len(rows)

    out = StringIO()
    call_command("fabric_status", spec.name, "--once", stdout=out)
    text = out.getvalue()
    assert "hottest ports" in text and "leaf-r" in text
    assert f"{socket.gethostname()}:{os.getpid()}" in text  # the collector process (run on a thread here)
    status = fabric_status(spec.name, redis_url=redis_url)
    assert status.hot and status.hot[0].util >= status.hot[-1].util
    assert status.hot[0].peer  # a rail-leaf's hottest port faces a GPU NIC or a spine


@pytest.mark.django_db
def test_status_says_when_there_are_no_frames(fabric_name, redis_client) -> None:
    import_fabric(two_leaf_one_spine(fabric_name, servers=2))
    out = StringIO()
    call_command("fabric_status", fabric_name, "--once", stdout=out)
    assert "no frames yet — is the collector running?" in out.getvalue()


def test_next_lease_holder_continues_from_the_last_read(twin_process, redis_url, settings) -> None:
    """Handover loses no sample: the new holder differences against the read the old one stored."""
    settings.FABRICMON_SHARD_SIZE = 6
    spec = collector_spec(twin_process.fabric, interval_s=1.0, timeout_s=0.3)
    first, second = [], []
    r1 = run_shard(f"{spec.name}:0", lease_s=5, run_s=2.2, fabrics=[spec], redis_url=redis_url,
                   observer=first.append, history=False)
    r2 = run_shard(f"{spec.name}:0", lease_s=5, run_s=1.6, fabrics=[spec], redis_url=redis_url,
                   observer=second.append, history=False)
    assert r1.acquired and r2.acquired and r1.ended == r2.ended == "lease_end"
    assert first and second
    first_of_second = {}
    for rec in second:
        first_of_second.setdefault(rec.switch, rec)
    last_of_first = {rec.switch: rec for rec in first if rec.error_kind is None}
    for switch, rec in first_of_second.items():
        assert rec.slice.ok, f"{switch}: first poll of the new lease had no baseline"
        assert rec.slice.t_prev_ns == last_of_first[switch].slice.t_cur_ns


@pytest.mark.django_db
def test_ensure_collectors_enqueues_free_shards_once(fabric_name, redis_client, redis_url, settings,
                                                     monkeypatch) -> None:
    """A shard gets a collector queued while it lacks its holder or its standby, once per marker."""
    settings.FABRICMON_SHARD_SIZE = 2
    import_fabric(two_leaf_two_spine(fabric_name, servers=2))  # 4 switches
    ours = {f"{fabric_name}:0", f"{fabric_name}:1"}
    monkeypatch.setenv("FABRICMON_WORKER_ID", "worker-a")
    held = Lease.acquire(redis_client, f"{fabric_name}:1", 5)
    monkeypatch.setenv("FABRICMON_WORKER_ID", "worker-b")  # the standby in another worker
    waiting = Standby.register(redis_client, f"{fabric_name}:1", 5)
    assert held is not None and waiting is not None
    queued: list[str] = []
    try:
        ensure_collectors(queued.append, redis_url=redis_url)
        assert [s for s in queued if s in ours] == [f"{fabric_name}:0"]  # held and backed: left alone
        ensure_collectors(queued.append, redis_url=redis_url)
        assert [s for s in queued if s in ours] == [f"{fabric_name}:0"]  # queued, not yet started: once
        shard_started(f"{fabric_name}:0", redis_url=redis_url)
        waiting.release()  # the standby took the shard over, or died: the holder has no standby
        ensure_collectors(queued.append, redis_url=redis_url)
        assert sorted(s for s in queued if s in ours) == [f"{fabric_name}:0", f"{fabric_name}:0", f"{fabric_name}:1"]
    finally:
        held.release()
        waiting.release()
        redis_client.delete(*(keys.enqueued(s) for s in ours))


@pytest.mark.django_db
def test_ensure_collectors_asks_for_a_standby_outside_the_holders_worker(fabric_name, redis_client, redis_url,
                                                                         settings, monkeypatch) -> None:
    """A standby in its holder's worker dies with it: beat queues a collector that another worker
    may pick up to take its place, at most once per placement_s (one worker can do no better)."""
    settings.FABRICMON_SHARD_SIZE = 4
    import_fabric(two_leaf_two_spine(fabric_name, servers=2))  # 4 switches: one shard
    shard = f"{fabric_name}:0"
    monkeypatch.setenv("FABRICMON_WORKER_ID", "worker-a")
    held = Lease.acquire(redis_client, shard, 5)
    weak = Standby.register(redis_client, shard, 5)  # the same worker
    assert held is not None and weak is not None
    queued: list[str] = []
    try:
        ensure_collectors(queued.append, placement_s=30, redis_url=redis_url)
        assert [s for s in queued if s == shard] == [shard]
        shard_started(shard, redis_url=redis_url)  # it ran, in worker-a again: no better place
        assert Standby.displace(redis_client, shard, 5) is None
        ensure_collectors(queued.append, placement_s=30, redis_url=redis_url)
        assert [s for s in queued if s == shard] == [shard]  # not again within placement_s
        redis_client.delete(keys.placement(shard))  # placement_s later …
        ensure_collectors(queued.append, placement_s=30, redis_url=redis_url)
        assert [s for s in queued if s == shard] == [shard, shard]
        shard_started(shard, redis_url=redis_url)
        monkeypatch.setenv("FABRICMON_WORKER_ID", "worker-b")  # … it ran in another worker
        moved = Standby.displace(redis_client, shard, 5)
        assert moved is not None and standby(redis_client, shard) == moved.token
        assert not weak.renew()  # the displaced standby learns it at its next renew, and ends
        redis_client.delete(keys.placement(shard))
        ensure_collectors(queued.append, placement_s=30, redis_url=redis_url)
        assert [s for s in queued if s == shard] == [shard, shard]  # placed: left alone
        monkeypatch.setenv("FABRICMON_WORKER_ID", "worker-c")
        assert Standby.displace(redis_client, shard, 5) is None  # a good standby is never displaced
        moved.release()
    finally:
        held.release()
        weak.release()
        redis_client.delete(keys.enqueued(shard), keys.placement(shard))


@pytest.mark.django_db
def test_status_names_an_unknown_fabric(fabric_name) -> None:
    with pytest.raises(CommandError, match=f"no fabric named '{fabric_name}'"):
        call_command("fabric_status", fabric_name, "--once", stdout=StringIO())
    assert run_shard(f"{fabric_name}:0", lease_s=1, fabrics=[], history=False).ended == "unknown_shard"


def test_a_new_holder_frames_every_tick_while_its_first_polls_are_slow(twin_process, redis_url, redis_client,
                                                                       settings, monkeypatch) -> None:
    """A worker that just took a shard over is slow at first (a fresh process importing, sessions
    connecting): its first poll of each switch here takes three intervals. The ticks it owes meanwhile
    are framed as explicit no-data at their deadlines, not left out of the window (the soak lost the
    takeover tick after a kill this way)."""
    import asyncio

    from fabricmon.telemetry.shard_loop import ShardCollector

    settings.FABRICMON_SHARD_SIZE = 64
    spec = collector_spec(twin_process.fabric)
    original = ShardCollector._poll_once
    slowed: set[str] = set()

    async def slow_first_poll(self, sw, ports):
        if sw.name not in slowed:
            slowed.add(sw.name)
            await asyncio.sleep(3 * INTERVAL_S)
        return await original(self, sw, ports)

    monkeypatch.setattr(ShardCollector, "_poll_once", slow_first_poll)
    started_ns = time.time_ns()
    with run_collectors([spec], [f"{spec.name}:0"], redis_url, lease_s=5.0):
        assert _wait_for(lambda: len(live_window.read_window(redis_client, spec.name)) >= 8, 10)
    frames = sorted((f for _, f in live_window.read_window(redis_client, spec.name)), key=lambda f: f.ts_ns)
    ticks = np.array([f.ts_ns for f in frames])
    step = round(INTERVAL_S * 1e9)
    assert ticks[0] <= started_ns + step, "the holder's first tick has no frame"
    assert (np.diff(ticks) == step).all(), f"ticks missing: {np.flatnonzero(np.diff(ticks) != step)}"
    assert np.isnan(frames[1].metrics["util"]).all()  # owed while the first polls ran: no data, said so
    assert np.isfinite(frames[-1].metrics["util"]).any()
