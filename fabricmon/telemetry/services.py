"""Telemetry verbs: run a shard for one lease, keep every shard collected, write history, report.

Celery tasks (``tasks.py``) and the ``fabric_status`` command are thin shells over these.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import redis
from django.conf import settings
from django.db import OperationalError, close_old_connections

from collectors.snmp import SnmpPoller, SnmpPollError, SnmpTarget
from fabricmon.base import keys
from fabricmon.base.connections import connect
from fabricmon.core.telemetry.downsample import downsample
from fabricmon.core.telemetry.frames import Frame
from fabricmon.core.topology.spec import FabricSpec, SwitchSpec
from fabricmon.telemetry import event_loop, live_window
from fabricmon.telemetry.framing import FabricFramer
from fabricmon.telemetry.leases import (
    STANDBY_WAKE_S,
    WATCH_S,
    Lease,
    Standby,
    holder,
    is_weak,
    lease_expires_in_s,
    standby,
    ttl_for,
    wait_for_handback,
)
from fabricmon.telemetry.models import HistoryFrame
from fabricmon.telemetry.poll_journal import PollJournal
from fabricmon.telemetry.shard_loop import PollRecord, ShardCollector, ShardReport
from fabricmon.telemetry.shards import Shard, UnknownShardError, find_shard, plan_shards
from fabricmon.topology.fabric_view import fabric_view
from fabricmon.topology.models import Fabric
from fabricmon.topology.services import Secrets, collector_protocols, fabric_spec

log = logging.getLogger(__name__)
MAX_WALK_INTERVALS = 3  # a walk slower than this many intervals is abandoned as a timeout


def load_fabrics(secrets: Secrets = "reveal") -> list[FabricSpec]:
    """Every fabric in the database, as specs (what the collectors poll, SNMP secrets decrypted)."""
    return [fabric_spec(f, secrets=secrets) for f in Fabric.objects.all()]


def all_shards(fabrics: Sequence[FabricSpec] | None = None) -> list[Shard]:
    # planning needs names and intervals only: beat runs this every few seconds, decrypting nothing
    specs = load_fabrics(secrets="omit") if fabrics is None else fabrics
    return plan_shards(specs, settings.FABRICMON_SHARD_SIZE)


# --- the shard loop -------------------------------------------------------------------------------


def run_shard(
    shard_id: str, *, lease_s: float | None = None, stop_event: threading.Event | None = None,
    fabrics: Sequence[FabricSpec] | None = None, redis_url: str | None = None, run_s: float | None = None,
    observer: Callable[[PollRecord], None] | None = None, history: bool = True,
    protocols: Mapping[str, str] | None = None, standby: bool = False,
) -> ShardReport:
    """Collect shard ``shard_id`` for as long as this collector holds its lease.

    Polls the shard's switches on this thread's long-lived event loop (one pysnmp engine per loop),
    reports slices and builds frames, renews the lease every third of its TTL (``lease_s``; default
    from the shard's fastest interval, ``leases.ttl_for``) and never hands a healthy shard back: it
    returns on ``stop_event``, after ``run_s`` (None: never) or when the lease is lost.

    If another collector holds the shard: returns ``not_acquired`` at once, or with ``standby``
    registers as the shard's one standby and takes over the moment the lease is gone (``ended``
    is ``standby_not_needed`` when the shard already has a standby). ``unknown_shard``: the
    topology no longer has it. ``fabrics`` defaults to the database topology; ``observer`` sees
    every poll (diagnostics, tests). ``protocols`` (switch → snmp | gnmi | both) defaults to the
    database's collector choice, or SNMP for ``fabrics`` given in code.
    """
    specs = load_fabrics() if fabrics is None else list(fabrics)
    try:
        shard = find_shard(specs, settings.FABRICMON_SHARD_SIZE, shard_id)
    except UnknownShardError as exc:  # queued before the fabric was deleted or shrunk: nothing to do
        log.warning("%s", exc)
        return ShardReport(shard_id, acquired=False, ended="unknown_shard")
    spec = next(f for f in specs if f.name == shard.fabric)
    if protocols is None and fabrics is None:
        protocols = collector_protocols(spec.name)
    fastest = min(spec.switch(n).snmp.interval_s for n in shard.switches)
    ttl = lease_s or ttl_for(fastest, settings.FABRICMON_LEASE_TTL_S)
    until = None if run_s is None else time.monotonic() + run_s
    r = connect(redis_url)
    try:
        lease = Lease.acquire(r, shard_id, ttl)
        took_over = False
        if lease is None:
            if not standby:
                return ShardReport(shard_id, acquired=False, ended="not_acquired")
            lease, ended = _stand_by(r, shard_id, ttl, stop_event, until)
            if lease is None:
                return ShardReport(shard_id, acquired=False, ended=ended)
            took_over = True
        lease.keep_alive()  # from now: the framer and sessions below take a while to build
        journal: PollJournal | None = None
        try:
            if settings.FABRICMON_POLL_JOURNAL_DIR:  # inside the try: a journal that fails hands back
                journal = PollJournal(settings.FABRICMON_POLL_JOURNAL_DIR, shard_id, lease.token)
                observer = _both(observer, journal)
            framer = FabricFramer(spec, window_s=settings.FABRICMON_LIVE_WINDOW_S)
            poll_fn, names_fn = _snmp_fns()
            sink = _history_sink(redis_url) if history else None
            collector = ShardCollector(
                r, shard, framer, lease, poll_fn, names=names_fn,
                run_s=None if until is None else max(0.0, until - time.monotonic()),
                stop_event=stop_event, observer=observer, history_sink=sink,
                history_step_s=settings.FABRICMON_HISTORY_STEP_S, protocols=protocols,
            )
            collector.report.took_over = took_over
            how = "took over" if took_over else "acquired"
            log.info("shard %s: collecting (%s, lease %s)", shard_id, how, lease.token)
            return event_loop.event_loop().run_until_complete(collector.run())
        finally:
            lease.release()
            if journal is not None:
                journal.close()
    finally:
        r.close()


def _both(a: Callable[[PollRecord], None] | None,
          b: Callable[[PollRecord], None] | None) -> Callable[[PollRecord], None] | None:
    if a is None or b is None:
        return a or b

    def observe(rec: PollRecord) -> None:
        a(rec)
        b(rec)

    return observe


def _stand_by(
    r: redis.Redis, shard_id: str, ttl_s: float, stop_event: threading.Event | None, until: float | None
) -> tuple[Lease | None, str]:
    """Wait beside the shard's holder as its one standby; take the lease the moment it is gone.
    Returns (lease, "") on takeover, else (None, why the wait ended).

    A Redis that does not answer for a while (a timeout, a dropped connection, a restart) is waited
    out in the slot: giving it up on each error left the shard without a standby until the task
    came back, and a holder that died meanwhile waited for a new collector (a 6.7 s takeover in
    the hour soak). Once Redis answers, the slot is renewed or taken back and the lease looked at."""
    # the free slot, else a weak standby's (one in the holder's worker) if this is another worker
    me = Standby.register(r, shard_id, ttl_s) or Standby.displace(r, shard_id, ttl_s)
    if me is None:
        return None, "standby_not_needed"
    next_renew = time.monotonic() + ttl_s / 3
    look_at = 0.0  # when the lease could expire next (monotonic): look at it then, or on a release
    unreachable_since: float | None = None
    try:
        while True:
            if stop_event is not None and stop_event.is_set():
                return None, "stopped"
            now = time.monotonic()
            if until is not None and now >= until:
                return None, "lease_end"
            doing = "renewing its slot"
            try:
                if now >= next_renew:
                    if not me.keep():
                        return None, "standby_lost"
                    next_renew = now + ttl_s / 3
                doing = "looking at the lease"
                if now >= look_at:
                    left = lease_expires_in_s(r, shard_id)
                    if left is None:
                        lease = Lease.acquire(r, shard_id, ttl_s)
                        if lease is not None:
                            return lease, ""
                        left = WATCH_S  # someone took it between the two: look again soon
                    look_at = now + left
                ends = [look_at, next_renew, now + STANDBY_WAKE_S] + ([] if until is None else [until])
                doing = f"waiting {min(ends) - time.monotonic():.3f} s for a hand-back"
                if wait_for_handback(r, shard_id, min(ends) - time.monotonic()):
                    look_at = 0.0  # released: look now
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                if unreachable_since is None:
                    unreachable_since = now
                    log.warning("shard %s: standby: Redis unreachable while %s (%s); waiting in the slot",
                                shard_id, doing, exc)
                look_at = next_renew = 0.0  # when it answers: the slot first, then the lease
                _pause(stop_event, STANDBY_WAKE_S)
                continue
            if unreachable_since is not None:
                log.info("shard %s: standby: Redis answers again after %.1f s", shard_id,
                         time.monotonic() - unreachable_since)
                unreachable_since = None
    finally:
        me.release()


def _pause(stop_event: threading.Event | None, seconds: float) -> None:
    if stop_event is not None:
        stop_event.wait(seconds)
    else:
        time.sleep(seconds)


SHUTDOWN = threading.Event()  # set in a worker process that is shutting down (telemetry.tasks)


def keep_collecting(
    shard_id: str, *, stop_event: threading.Event = SHUTDOWN, redis_url: str | None = None, **shard: Any
) -> str:
    """A collector task's life: hold the shard, or stand by beside its holder, until ``stop_event``.

    A lost lease or standby slot (Redis restarted, the loop stalled past the TTL and the standby
    took over) sends it back to the shard — as its standby, or its holder again; Redis being
    unreachable is waited out. Ends when the shard already has a holder and a standby, or is gone.
    ``shard``: more of ``run_shard``'s arguments (tests and benches: ``fabrics``, ``history``).
    """
    while not stop_event.is_set():
        try:
            report = run_shard(shard_id, standby=True, stop_event=stop_event, redis_url=redis_url, **shard)
        except redis.RedisError as exc:
            log.warning("shard %s: Redis unreachable (%s); trying again", shard_id, exc)
            stop_event.wait(1.0)
            continue
        if report.ended in ("standby_not_needed", "unknown_shard"):
            return report.ended
        stop_event.wait(0.1)
    return "stopped"


def _snmp_fns() -> tuple[Callable[[SwitchSpec], Any], Callable[[SwitchSpec], Any]]:
    """(poll, names) of one poller: a switch's IF-MIB counters, and its ifName per ifIndex."""
    poller = SnmpPoller(engine=settings.FABRICMON_SNMP_ENGINE)

    async def names(sw: SwitchSpec) -> dict[int, str]:
        target = SnmpTarget(sw.name, sw.mgmt_address, sw.snmp.port, sw.snmp)
        try:
            async with asyncio.timeout(sw.snmp.interval_s * MAX_WALK_INTERVALS):
                return await poller.names(target)
        except TimeoutError:
            raise SnmpPollError("timeout", f"{sw.name}: no complete ifName walk within "
                                           f"{MAX_WALK_INTERVALS} intervals") from None

    async def poll(sw: SwitchSpec) -> Any:
        target = SnmpTarget(sw.name, sw.mgmt_address, sw.snmp.port, sw.snmp)
        try:
            # Belt and braces: whatever the client does, a walk never outlives MAX_WALK_INTERVALS
            # intervals. A slower walk than the interval is a late cell, not a failed poll.
            async with asyncio.timeout(sw.snmp.interval_s * MAX_WALK_INTERVALS):
                return await poller.poll(target)
        except TimeoutError:
            raise SnmpPollError(
                "timeout", f"{sw.name}: no complete walk within {MAX_WALK_INTERVALS} intervals"
            ) from None

    return poll, names


# --- keeping every shard collected ----------------------------------------------------------------


def ensure_collectors(enqueue: Callable[[str], None], *, hold_s: float = 10.0, placement_s: float = 10.0,
                      redis_url: str | None = None) -> list[str]:
    """Enqueue a collector for every shard that lacks its holder or its standby (none running yet,
    or a worker died and the standby took over), or whose standby is weak (in its holder's worker:
    a collector that lands in another worker takes its place, ``leases.Standby.displace``).

    A short ``fm:enqueued:{shard}`` marker keeps a backlog from piling up while a queued task has
    not started yet; a task that starts decides its role (holder, standby, or not needed). A weak
    standby is asked to move at most once per ``placement_s`` (``fm:placement:{shard}``): with a
    single worker no collector can do better, and that costs one short task per shard per ``placement_s``.
    """
    r = connect(redis_url)
    started: list[str] = []
    try:
        for shard in all_shards():
            held, waiting = holder(r, shard.shard_id), standby(r, shard.shard_id)
            if held is not None and waiting is not None:
                if not is_weak(held, waiting):
                    continue
                if not r.set(keys.placement(shard.shard_id), b"1", nx=True, px=round(placement_s * 1000)):
                    continue
            if r.set(keys.enqueued(shard.shard_id), b"1", nx=True, px=round(hold_s * 1000)):
                enqueue(shard.shard_id)
                started.append(shard.shard_id)
    finally:
        r.close()
    return started


def shard_started(shard_id: str, redis_url: str | None = None) -> None:
    """Clear the enqueue marker once a task runs, so a free shard can be re-enqueued right away."""
    r = connect(redis_url)
    try:
        r.delete(keys.enqueued(shard_id))
    finally:
        r.close()


# --- history --------------------------------------------------------------------------------------


# A busy database (SQLite's one write lock held past its 20 s timeout by other writers) is tried
# again after these pauses: the step's frames stay in the live window for minutes, so a late row
# is still a whole one. It runs on the collector's executor thread, never in the poll loop.
HISTORY_RETRY_PAUSES_S = (5.0, 15.0, 30.0)


def _history_sink(redis_url: str | None) -> Callable[[FabricFramer, int, int], None]:
    def sink(framer: FabricFramer, start_ns: int, end_ns: int) -> None:
        for attempt, pause in enumerate((*HISTORY_RETRY_PAUSES_S, None), start=1):
            try:
                write_history(framer.fabric, start_ns, end_ns, max_frames=framer.max_frames,
                              redis_url=redis_url)
                return
            except OperationalError as exc:  # busy or unreachable: expected, said in one line
                if pause is None:
                    log.warning("history for %s at %d not written after %d tries: %s",
                                framer.fabric, start_ns, attempt, exc)
                    return
                time.sleep(pause)
            except Exception:  # our bug: history must never take the collector down
                log.exception("history for %s at %d failed", framer.fabric, start_ns)
                return

    return sink


def write_history(fabric: str, start_ns: int, end_ns: int, *, max_frames: int = 10_000,
                  redis_url: str | None = None) -> int:
    """Downsample the live window's frames with ``start_ns < ts ≤ end_ns`` into HistoryFrame rows
    (one per topology version present), then prune rows older than the retention. Returns rows written."""
    close_old_connections()
    r = connect(redis_url)
    try:
        frames = [f for f in live_window.frames_after(r, fabric, start_ns, max_frames) if f.ts_ns <= end_ns]
    finally:
        r.close()
    row = Fabric.objects.filter(name=fabric).first()
    if row is None or not frames:
        return 0
    step_s = (end_ns - start_ns) / 1e9
    by_version: dict[str, list[Frame]] = {}
    for f in frames:
        by_version.setdefault(f.topology_version, []).append(f)
    ts = datetime.fromtimestamp(start_ns / 1e9, tz=UTC)
    for version, group in by_version.items():
        summary = downsample(group, end_ns=end_ns, step_s=step_s)
        HistoryFrame.objects.update_or_create(
            fabric=row, ts=ts, step_s=step_s, topology_version=version,
            defaults={"n_samples": len(group), "blob": summary.encode()},
        )
    prune_history(settings.FABRICMON_HISTORY_RETENTION_S)
    return len(by_version)


def prune_history(retention_s: float) -> int:
    cutoff = datetime.now(tz=UTC) - timedelta(seconds=retention_s)
    deleted, _ = HistoryFrame.objects.filter(ts__lt=cutoff).delete()
    return int(deleted)


# --- status ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HotPort:
    switch: str
    port: str
    peer: str
    util: float
    in_bps: float
    out_bps: float


@dataclass(frozen=True)
class FabricStatus:
    """What ``fabric_status`` prints: per-switch health and the hottest ports of the latest frame."""

    fabric: str
    health: dict[str, dict[str, Any]]
    frame_ts_ns: int | None
    hot: list[HotPort] = field(default_factory=list)
    note: str = ""


def fabric_status(fabric: str, *, top: int = 10, redis_url: str | None = None) -> FabricStatus:
    r = connect(redis_url)
    try:
        health = live_window.read_health(r, fabric)
        latest = live_window.latest(r, fabric)
    finally:
        r.close()
    if latest is None:
        return FabricStatus(fabric, health, None, note="no frames yet — is the collector running?")
    frame = latest[1]
    view = fabric_view(fabric)
    index = view.index
    if frame.topology_version != index.version or frame.n_ports != len(index):
        return FabricStatus(fabric, health, frame.ts_ns,
                            note=f"latest frame is for topology {frame.topology_version}, "
                                 f"the database has {index.version}: re-cabled? waiting for new frames")
    util = np.asarray(frame.metrics.get("util", np.full(len(index), np.nan)), dtype=np.float64)
    order = np.argsort(np.where(np.isfinite(util), -util, np.inf), kind="stable")[:top]
    order = order[np.isfinite(util[order])]
    peers = view.peers
    nan = np.full(len(index), np.nan)
    in_bps, out_bps = frame.metrics.get("in_bps", nan), frame.metrics.get("out_bps", nan)
    hot = [
        HotPort(index.switch_names[index.switch_of[i]], index.port_names[i],
                peers[i] if i < len(peers) else "", float(util[i]), float(in_bps[i]), float(out_bps[i]))
        for i in order.tolist()
    ]
    return FabricStatus(fabric, health, frame.ts_ns, hot)
