"""The shard loop: poll a shard's switches on their own wall-clock grids, for one lease.

One asyncio task per switch, one per fabric deadline, one supervisor::

    supervisor ── every 0.25 s: stop requested? lease lost? (renewed from its own thread)
    leaf-r0   ──▶ sleep to next k·I ─▶ poll ─▶ rates vs previous read ─▶ slice ─▶ report ─▶ health
    leaf-r1   ──▶ …                                    (a dead switch times out on its own task;
    spine0    ──▶ …                                     the others keep their schedule)
    deadline  ──▶ at tick + budget: build the frame with whatever reported (dead shard → NaN)

Polls are aligned to multiples of the switch's interval on the wall clock, so switches of all
shards sample together and a frame mixes counters read within one poll budget of each other.
The last good read of each switch is kept in Redis (``fm:read:{fabric}:{switch}``) so the next
lease holder, on any worker, differences against it instead of losing a sample per handover.

Each switch's ports are aligned to the agent by ifName (``port_map.PortMap``: re-read at lease
start, after an agent restart or a changed ifIndex set), reads the agent repeated from its cache
are held (``collectors.snmp.slices.hold_unchanged``), and every change of a switch's state (up,
down and why) is logged once, structured (``extra``: fabric, switch, state, error kind, error).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import redis

from collectors.snmp.slices import (
    REASON_TEXT,
    STALE_HOLD_S,
    SwitchRead,
    compute_slice,
    decode_read,
    encode_read,
    hold_unchanged,
    read_from_snapshot,
)
from fabricmon.base import keys
from fabricmon.core.telemetry.frames import Frame
from fabricmon.core.telemetry.rates import RateReason
from fabricmon.core.telemetry.slices import SwitchSlice
from fabricmon.core.topology.spec import SwitchSpec
from fabricmon.telemetry import gnmi_loop, live_window
from fabricmon.telemetry.framing import FabricFramer
from fabricmon.telemetry.leases import Lease
from fabricmon.telemetry.port_map import NamesFn, PortMap
from fabricmon.telemetry.shards import Shard

log = logging.getLogger(__name__)

PollFn = Callable[[SwitchSpec], Awaitable[Any]]  # → collectors.snmp.IfSnapshot, raises SnmpPollError
HistorySink = Callable[[FabricFramer, int, int], None]  # (framer, start_ns, end_ns), run off-loop
# A previous read older than this many intervals is not differenced against (the sample would
# average over a stretch nobody watched: better one NaN than a smeared value).
MAX_BASELINE_INTERVALS = 3
# A switch is reported down after this many failed polls in a row: one slow or lost poll is a late
# or missing cell, not an outage.
DOWN_AFTER_FAILURES = 2
# A new holder fills at most this many unframed ticks since the last frame with no-data frames (a
# takeover gap); an older hole is an outage of the whole fabric's collection and stays visible.
MAX_GAP_TICKS = 120
SUPERVISE_WAKE_S = 0.25  # how often the supervisor looks at its stop flag between renewals
# A holder that is asked to stop hands its shard over at a tick boundary: its polls of the last
# tick are done and the lease is released this long before the boundary, so the standby (woken
# by the release: leases.wait_for_handback) polls the next tick itself.
HANDBACK_LEAD_NS = 150_000_000
# A new holder that starts this early into a tick (fraction of the frame interval) still polls that
# tick; later, it frames the tick with what was reported and polls from the next one.
LATE_START_FRACTION = 0.3
# Per-port notes a switch's health carries (ports whose latest sample withheld a metric): bounded.
MAX_PORT_NOTES = 200
# Sample reasons that need no note: the first poll, and a poll that failed (said by the switch).
_QUIET_REASONS = frozenset({"ok", "no_baseline", "gap"})


@dataclass(frozen=True)
class PollRecord:
    """What happened at one scheduled poll (given to an observer: tests, diagnostics)."""

    fabric: str
    switch: str
    scheduled_ns: int
    frame_tick_ns: int
    started_ns: int
    finished_ns: int
    slice: SwitchSlice
    error_kind: str | None


@dataclass
class ShardReport:
    """How a lease went: returned by ``services.run_shard``."""

    shard_id: str
    acquired: bool
    # lease_end (run_s over) | stopped | lease_lost | not_acquired | standby_not_needed |
    # standby_lost | unknown_shard
    ended: str = ""
    polls: int = 0
    failures: int = 0
    frames_built: int = 0
    gap_frames: int = 0  # unframed ticks filled with what was reported when the shard was taken over
    took_over: bool = False  # the lease was taken from a holder that was gone, after standing by


@dataclass
class _Health:
    """One switch's health, kept in memory and written to the live window's health hash."""

    shard_id: str
    interval_s: float
    up: bool = False
    last_success_ns: int | None = None
    last_poll_ns: int | None = None
    poll_ms: float | None = None
    consecutive_failures: int = 0
    polls: int = 0
    late_polls: int = 0  # polls that finished after their frame was built: a late cell, not down
    error_counts: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)
    last_error: str = ""
    last_error_ns: int | None = None  # when last_error happened (the page says how long ago)
    extra: dict[str, Any] = field(default_factory=dict)  # protocol specifics (gNMI session health)
    state: str = ""  # "up" or "down: <error kind>", as last logged (a change is logged once)

    @classmethod
    def resume(cls, shard_id: str, interval_s: float, old: dict[str, Any] | None) -> _Health:
        """Carry the counts of the previous lease holder (health is per switch, not per lease)."""
        h = cls(shard_id, interval_s)
        if old:
            h.last_success_ns = old.get("last_success_ns")
            h.consecutive_failures = int(old.get("consecutive_failures", 0))
            h.polls = int(old.get("polls", 0))
            h.late_polls = int(old.get("late_polls", 0))
            h.error_counts.update(old.get("error_counts", {}))
            h.dropped.update(old.get("dropped", {}))
            h.last_error = str(old.get("last_error", ""))
            h.last_error_ns = old.get("last_error_ns")
            h.state = str(old.get("logged_state", ""))
            h.up = bool(old.get("up", False))
        return h

    def as_dict(self) -> dict[str, Any]:
        return {
            "up": self.up, "last_success_ns": self.last_success_ns, "last_poll_ns": self.last_poll_ns,
            "poll_ms": self.poll_ms, "errors": self.consecutive_failures,
            "consecutive_failures": self.consecutive_failures, "polls": self.polls,
            "late_polls": self.late_polls,
            "error_counts": dict(self.error_counts), "dropped": dict(self.dropped),
            "last_error": self.last_error, "last_error_ns": self.last_error_ns,
            "interval_s": self.interval_s, "shard": self.shard_id,
            "logged_state": self.state, **self.extra,
        }


class ShardCollector:
    """Runs one shard while it holds its lease, on the current event loop. Build it, then
    ``await run()``; it ends on ``stop_event``, after ``run_s`` (None: never) or when the lease is lost."""

    def __init__(
        self, r: redis.Redis, shard: Shard, framer: FabricFramer, lease: Lease, poll: PollFn, *,
        run_s: float | None, stop_event: threading.Event | None = None,
        observer: Callable[[PollRecord], None] | None = None, history_sink: HistorySink | None = None,
        history_step_s: float = 60.0, protocols: Mapping[str, str] | None = None,
        names: NamesFn | None = None,
    ) -> None:
        self.r, self.shard, self.framer, self.lease, self.poll = r, shard, framer, lease, poll
        self.names = names  # ifName per ifIndex of a switch (None: ports stay at the topology's ifIndex)
        # Who collects, for the health page: this process and its lease on the shard.
        self.collector = {"process": f"{socket.gethostname()}:{os.getpid()}", "shard": shard.shard_id,
                          "lease": lease.token, "lease_ttl_s": lease.ttl_s}
        # switch → "snmp" | "gnmi" | "both" (default snmp); gNMI needs the switch's gNMI target
        self.protocols = dict(protocols or {})
        self.gnmi_names = gnmi_loop.gnmi_switches({n: framer.spec.switch(n) for n in shard.switches},
                                                  self.protocols)
        self.gnmi: Any = None  # collectors.gnmi.session.GnmiCollector while running
        self.run_s, self.stop_event, self.observer = run_s, stop_event, observer
        self.history_sink, self.history_step_ns = history_sink, round(history_step_s * 1e9)
        self.report = ShardReport(shard.shard_id, acquired=True)
        self.fabric = framer.fabric
        # Loops also check this flag, not only cancellation: on Python 3.11 asyncio.wait_for can
        # swallow a cancel that races with its inner task finishing, and a `while True` loop would
        # then outlive its lease (seen in CI as a shard that never handed back).
        self._stopping = False
        self._handback_tick: int | None = None  # no poll of this tick or later (handing over)
        self._gnmi_ticks: dict[str, int] = {}  # switch → last tick gNMI delivered data for
        # gNMI slices and health taken since the last flush: the switch loops all wake at the tick
        # boundary, and one pipeline carries them all (``_gnmi_flush_loop``)
        self._gnmi_out: list[tuple[str, int, bytes]] = []
        self._gnmi_health: dict[str, dict[str, Any]] = {}
        self._gnmi_flush = asyncio.Event()
        now = time.time_ns()
        tick = framer.frame_tick(now)
        late = now - tick > LATE_START_FRACTION * framer.frame_ns
        self._start_tick = tick + framer.frame_ns if late else tick  # the first tick this holder polls
        old = live_window.read_health(r, self.fabric)
        self._old_health = old
        self.health = {
            name: _Health.resume(shard.shard_id, framer.spec.switch(name).snmp.interval_s, old.get(name))
            for name in shard.switches
        }

    async def run(self) -> ShardReport:
        self._fill_gap()
        spec = self.framer.spec
        snmp_names = [n for n in self.shard.switches
                      if n not in self.gnmi_names or self.protocols.get(n) == "both"]
        tasks = [asyncio.create_task(self._switch_loop(spec.switch(n))) for n in snmp_names]
        self.gnmi = gnmi_loop.start_collector(
            [gnmi_loop.target_spec(spec.switch(n), self.framer) for n in self.gnmi_names])
        for n in self.gnmi_names:
            tasks.append(asyncio.create_task(gnmi_loop.gnmi_switch_loop(
                spec.switch(n), self.gnmi.sessions[n], self.framer, deliver=self._deliver_gnmi,
                record=self._record_gnmi, running=lambda: not self._stopping)))
        if self.gnmi_names:
            tasks.append(asyncio.create_task(self._gnmi_flush_loop()))
        tasks.append(asyncio.create_task(self._deadline_loop()))
        for t in tasks:
            t.add_done_callback(self._loop_ended)
        try:
            self.report.ended = await self._supervise()
            if self.report.ended in ("stopped", "lease_end"):
                await self._hand_back()
        finally:
            self._stopping = True
            for t in tasks:
                t.cancel()
            # Bounded: a loop that missed its cancel still sees _stopping within one interval.
            grace_s = max(self.framer.interval_ns.values(), default=0) / 1e9 + 2.0
            _done, pending = await asyncio.wait(tasks, timeout=grace_s)
            if pending:
                log.warning("shard %s: %d loop(s) ignored cancellation; left behind", self.shard.shard_id,
                            len(pending))
            try:  # what the last tick's switch loops took, before the standby polls the next one
                self._flush_gnmi()
            except redis.RedisError as exc:
                log.warning("shard %s: last gNMI slices not written (%s)", self.shard.shard_id, exc)
            self.lease.release()  # before the gNMI sessions close: the standby may start at once
            if self.gnmi is not None:
                await self.gnmi.stop()
        return self.report

    def _loop_ended(self, task: asyncio.Task[Any]) -> None:
        """A loop that ends by itself ends the shard: its exception is taken here (never "never
        retrieved") and said once — Redis gone is a warning (the task waits it out and comes
        back), anything else is a bug with its traceback."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        if not self._stopping:
            if isinstance(exc, redis.RedisError):
                log.warning("shard %s: Redis unreachable (%s): stopping, the task will come back",
                            self.shard.shard_id, exc)
            else:
                log.error("shard %s: a loop failed; stopping the shard", self.shard.shard_id, exc_info=exc)
        self._stopping = True

    async def _hand_back(self) -> None:
        """Stop at a tick boundary: no poll of that tick or later, the previous tick's polls done,
        then (the caller) release the lease ``HANDBACK_LEAD_NS`` before the boundary."""
        f = self.framer
        now = time.time_ns()
        boundary = (now // f.frame_ns + 1) * f.frame_ns
        if boundary - now < 2 * HANDBACK_LEAD_NS:
            boundary += f.frame_ns
        self._handback_tick = boundary
        release_at = boundary - HANDBACK_LEAD_NS
        while (left := release_at - time.time_ns()) > 0:
            await asyncio.sleep(min(left / 1e9, self.lease.ttl_s / 3))
            if time.time_ns() < release_at and not self.lease.renew():
                return  # lost meanwhile: nothing left to hand over

    async def _supervise(self) -> str:
        """Keep the lease (renewed from its own thread, ``Lease.keep_alive``) for as long as the
        shard is held; a healthy shard is never handed back (``run_s`` bounds tests and benches,
        ``stop_event`` a shutdown)."""
        end = math.inf if self.run_s is None else time.monotonic() + self.run_s
        self.lease.keep_alive()
        while True:
            now = time.monotonic()
            await asyncio.sleep(max(0.0, min(end, now + SUPERVISE_WAKE_S) - now))
            now = time.monotonic()
            if self.stop_event is not None and self.stop_event.is_set():
                return "stopped"
            if now >= end:
                return "lease_end"
            if self._stopping:  # a switch loop saw the lease's local validity run out
                return "lease_lost"
            if not self.lease.held:
                log.warning("shard %s: lease lost, stopping", self.shard.shard_id)
                return "lease_lost"
            self.lease.beat()

    # --- one switch ---------------------------------------------------------------------------

    async def _switch_loop(self, sw: SwitchSpec) -> None:
        sl = self.framer.slices[sw.name]
        ifindex = self.framer.index.ifindex[sl]
        spec_speed = self.framer.index.speed_bps[sl]
        interval_ns = self.framer.interval_ns[sw.name]
        keep_read_ms = max(60_000, 10 * interval_ns // 1_000_000)
        max_baseline_ns = MAX_BASELINE_INTERVALS * interval_ns
        # Polls slower than an agent's cache refresh never read one cached value twice.
        hold_s = STALE_HOLD_S if interval_ns / 1e9 < STALE_HOLD_S / 1.25 else 0.0
        ports = PortMap(self.fabric, sw, ifindex, self.framer.index.port_names[sl], read_names=self.names,
                        old_health=self._old_health.get(sw.name))
        self.health[sw.name].extra["ports"] = ports
        prev = self._load_read(sw.name)
        ports.seed(prev.sys_uptime_ticks if prev is not None else None)
        scheduled = -(-self._start_tick // interval_ns) * interval_ns  # the first of its own grid
        try:
            while not self._stopping:
                await asyncio.sleep(max(0.0, (scheduled - time.time_ns()) / 1e9))
                if self._handback_tick is not None and scheduled >= self._handback_tick:
                    break  # the standby polls this tick
                if not self.lease.valid():  # it may have lapsed: never poll beside the next holder
                    self._stopping = True
                    break
                started = time.time_ns()
                cur, kind, message = await self._poll_once(sw, ports)
                finished = time.time_ns()
                if prev is not None and cur is not None and cur.ts_ns - prev.ts_ns > max_baseline_ns:
                    prev = None
                remapped = ports.take_changed()
                if prev is not None and remapped.any():  # never difference two ports' counters
                    prev = replace(prev, present=prev.present & ~remapped)
                if cur is not None:
                    cur = hold_unchanged(prev, cur, hold_s=hold_s)
                part = compute_slice(sw.name, prev, cur, spec_speed, started)
                tick = self.framer.frame_tick(scheduled)
                if cur is not None:
                    self.framer.observe_walk(sw.name, (finished - started) / 1e9)
                late = finished > tick + round(self.framer.deadline_s(tick) * 1e9)
                # "both": SNMP fills in while gNMI is down, and for a tick its stream left without a sample
                if not self._gnmi_up(sw.name) or self._gnmi_ticks.get(sw.name) != tick:
                    self._deliver(sw.name, tick, part)
                # Health and the read for the next holder in one round trip, not two (Redis round
                # trips are a tenth of the shard process's CPU in steady state: bench/snmp_operation.py).
                pipe = self.r.pipeline(transaction=False)
                self._record_health(sw.name, started, finished, cur, f"{kind}: {message}", part, late=late,
                                    r=pipe)
                if cur is not None:
                    prev = cur
                    pipe.set(keys.switch_read(self.fabric, sw.name), encode_read(cur), px=keep_read_ms)
                pipe.execute()
                if self.observer is not None:
                    self.observer(PollRecord(self.fabric, sw.name, scheduled, tick, started, finished, part,
                                             kind))
                scheduled = (time.time_ns() // interval_ns + 1) * interval_ns
        finally:
            ports.stop()

    async def _poll_once(self, sw: SwitchSpec, ports: PortMap) -> tuple[SwitchRead | None, str | None, str]:
        """One poll → (aligned read, None, "") or (None, error kind, message). Never raises."""
        try:
            snapshot = await self.poll(sw)
            await ports.update(snapshot)  # re-mapped by ifName if the agent may have renumbered
            return read_from_snapshot(snapshot, ports.ifindex), None, ""
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # SnmpPollError carries .kind; anything else is our bug
            kind = str(getattr(exc, "kind", "internal"))
            if kind == "internal":
                log.exception("shard %s: polling %s failed unexpectedly", self.shard.shard_id, sw.name)
            return None, kind, str(getattr(exc, "message", "") or exc)

    def _deliver_gnmi(self, switch: str, tick_ns: int, part: SwitchSlice) -> None:
        """A gNMI slice: delivered when it has data, or when nothing else can fill in (protocol
        gnmi). Under ``both`` a tick without a new sample is left to the SNMP poll of that tick."""
        if part.ok:
            self._gnmi_ticks[switch] = tick_ns
        elif self.protocols.get(switch) == "both":
            return
        self._gnmi_out.append((switch, tick_ns, self._blob(part)))
        self._gnmi_flush.set()

    async def _gnmi_flush_loop(self) -> None:
        """Write what the gNMI switch loops took, once per wake-up: they wake together at the tick
        boundary and each only queues, so a tick of the shard's switches is one round trip. A
        RedisError ends this loop, and with it the shard, as a switch loop's would."""
        while not self._stopping:
            await self._gnmi_flush.wait()
            self._gnmi_flush.clear()
            self._flush_gnmi()

    def _flush_gnmi(self) -> None:
        out, self._gnmi_out = self._gnmi_out, []
        health, self._gnmi_health = self._gnmi_health, {}

        def also(pipe: Any) -> None:
            live_window.write_healths(pipe, self.fabric, health)

        for frame in self.framer.report_many(self.r, out, also=also if health else None):
            self._after_frame(frame)

    def _gnmi_up(self, switch: str) -> bool:
        return self.gnmi is not None and switch in self.gnmi.sessions and self.gnmi.sessions[switch].up

    def _record_gnmi(self, switch: str, scheduled: int, part: SwitchSlice, session: dict[str, Any]) -> None:
        """Health of a gNMI switch: the SNMP shape (up, last_success_ns, errors…) plus ``gnmi``."""
        h = self.health[switch]
        h.extra["gnmi"] = session
        if self.observer is not None:
            now = time.time_ns()
            self.observer(PollRecord(self.fabric, switch, scheduled, self.framer.frame_tick(scheduled), now,
                                     now, part, None if part.ok else "gnmi_no_sample"))
        if self.protocols.get(switch) == "both":
            return  # the SNMP loop writes this switch's health, now carrying the gNMI session's
        h.polls += 1
        h.last_poll_ns = time.time_ns()
        h.poll_ms = session.get("poll_ms")
        h.up = bool(session.get("up"))
        self.report.polls += 1
        if part.ok:
            h.consecutive_failures = 0
            h.last_success_ns = part.t_cur_ns
        else:
            h.consecutive_failures += 1
            h.last_error = str(session.get("last_error") or "no new gNMI sample in the interval")
            h.last_error_ns = h.last_poll_ns
            self.report.failures += 1
        h.error_counts = Counter(session.get("error_counts", {}))
        self._log_state(switch, h, None if h.up else "gnmi", h.last_error)
        self._gnmi_health[switch] = self._health_dict(h)  # written with the tick's slices
        self._gnmi_flush.set()

    def _load_read(self, switch: str) -> SwitchRead | None:
        blob = self.r.get(keys.switch_read(self.fabric, switch))
        return decode_read(blob) if isinstance(blob, bytes) else None

    def _blob(self, part: SwitchSlice) -> bytes:
        """What a slice is reported as: encoded, or b"" for an explicit failed poll."""
        return part.encode(self.framer.index.version) if part.ok else b""

    def _deliver(self, switch: str, tick_ns: int, part: SwitchSlice) -> None:
        frame = self.framer.report(self.r, switch, tick_ns, self._blob(part))
        if frame is not None:
            self._after_frame(frame)

    def _record_health(self, switch: str, started: int, finished: int, cur: SwitchRead | None,  # noqa: PLR0917
                       error: str, part: SwitchSlice, *, late: bool = False, r: Any = None) -> None:
        h = self.health[switch]
        h.polls += 1
        h.last_poll_ns = started
        h.poll_ms = round((finished - started) / 1e6, 3)
        h.late_polls += int(late and cur is not None)
        self.report.polls += 1
        kind = error.split(":", 1)[0]
        if cur is None:
            h.consecutive_failures += 1
            h.up = h.consecutive_failures < DOWN_AFTER_FAILURES and h.up
            h.error_counts[kind] += 1
            h.last_error = error[:300]
            h.last_error_ns = finished
            self.report.failures += 1
        else:
            h.up = True
            h.consecutive_failures = 0
            h.last_success_ns = cur.ts_ns
            h.dropped.update({k: v for k, v in part.dropped.items() if k not in ("no_baseline",)})
            h.extra["port_notes"], h.extra["notes_text"] = self._port_notes(switch, part)
        self._log_state(switch, h, None if h.up else kind, h.last_error)
        live_window.write_health(self.r if r is None else r, self.fabric, switch, self._health_dict(h))

    def _health_dict(self, h: _Health) -> dict[str, Any]:
        d = h.as_dict()
        ports = d.pop("ports", None)
        if isinstance(ports, PortMap):
            d.update(ports.health())
        d["collector"] = self.collector
        return d

    def _port_notes(self, switch: str, part: SwitchSlice) -> tuple[dict[str, str], dict[str, str]]:
        """Per port (by name) the metrics its latest sample withheld and why, for the port page:
        ``{"Port-Channel1": "in_discards_ps: no_cell"}``, at most MAX_PORT_NOTES ports."""
        names = self.framer.index.port_names[self.framer.slices[switch]]
        notes: dict[str, list[str]] = {}
        for metric, codes in part.reasons.items():
            for k in np.flatnonzero(codes != 0).tolist():
                why = RateReason(int(codes[k])).name.lower()
                if why not in _QUIET_REASONS and k < len(names):
                    notes.setdefault(names[k], []).append(f"{metric}: {why}")
        out = {n: ", ".join(v) for n, v in sorted(notes.items())[:MAX_PORT_NOTES]}
        if len(notes) > MAX_PORT_NOTES:
            out["…"] = f"{len(notes) - MAX_PORT_NOTES} more ports"
        used = {w.split(": ", 1)[1] for v in notes.values() for w in v}
        return out, {w: REASON_TEXT[w] for w in sorted(used) if w in REASON_TEXT}

    def _log_state(self, switch: str, h: _Health, down_kind: str | None, error: str) -> None:
        """Log a switch's state once per change: up, or down and why (the error's kind)."""
        state = "up" if down_kind is None else f"down: {down_kind}"
        if state == h.state:
            return
        was, h.state = h.state, state
        extra = {"fabric": self.fabric, "switch": switch, "state": state, "was": was or None,
                 "error_kind": down_kind, "error": error if down_kind else None,
                 "shard": self.shard.shard_id, "event": "switch_state"}  # fmt: skip
        if down_kind is None:
            log.info("switch %s/%s up%s", self.fabric, switch, f" (was {was})" if was else "", extra=extra)
        else:
            log.warning("switch %s/%s %s: %s", self.fabric, switch, state, error, extra=extra)

    # --- frames -------------------------------------------------------------------------------

    async def _deadline_loop(self) -> None:
        """Build each tick's frame at its deadline if the fast path did not (a switch is slow or a
        shard is dead); the deadline follows the due switches' measured walk times."""
        f = self.framer
        tick = self._start_tick
        while not self._stopping:
            if self._handback_tick is not None and tick >= self._handback_tick:
                return
            deadline_ns = round(f.deadline_s(tick) * 1e9)
            await asyncio.sleep(max(0.0, (tick + deadline_ns - time.time_ns()) / 1e9))
            # A live holder owes every tick its frame: one nothing reported for by its deadline (the
            # first polls after a takeover, a poll slower than the interval that skipped its tick) is
            # explicit no-data like _fill_gap's, not a hole in the window; a report that comes after
            # it is one late cell (the next tick uses it).
            frame = f.build(self.r, tick, at_deadline=True, gap=True)
            if frame is not None:
                self._after_frame(frame)
            tick += f.frame_ns
            behind = time.time_ns() - (tick + round(f.deadline_s(tick) * 1e9))
            if behind > f.frame_ns:  # the loop was starved: skip ticks rather than replay them
                tick += (behind // f.frame_ns) * f.frame_ns

    def _fill_gap(self) -> None:
        """A holder that just took the shard over frames the ticks nobody framed since the last frame
        (its predecessor died, or handed over mid-tick), up to the current one: what was reported,
        and explicit no-data for the rest — a column of NaN, never a missing column."""
        f = self.framer
        newest = live_window.latest(self.r, self.fabric)
        if newest is None:
            return
        last = newest[1].ts_ns
        first = max(last + f.frame_ns, self._start_tick - MAX_GAP_TICKS * f.frame_ns)
        for tick in range(first, self._start_tick, f.frame_ns):
            frame = f.build(self.r, tick, gap=True)
            if frame is not None:
                self.report.gap_frames += 1
                self._after_frame(frame)

    def _after_frame(self, frame: Frame) -> None:
        self.report.frames_built += 1
        if self.history_sink is None:
            return
        step = self.history_step_ns
        step_end = -(-frame.ts_ns // step) * step
        if frame.ts_ns + self.framer.frame_ns <= step_end:
            return  # not the last tick of its step yet
        start = step_end - step
        guard_ms = max(600_000, 3 * step // 1_000_000)
        if self.r.set(keys.history_guard(self.fabric, start), b"1", nx=True, px=guard_ms):
            loop = asyncio.get_running_loop()
            # The database write must not stall the polls: run it on the default executor.
            loop.run_in_executor(None, self.history_sink, self.framer, start, step_end)
