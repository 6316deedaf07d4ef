"""A run's phase views over a WebSocket: a snapshot on connect, then deltas (``messages``).

:class:`PhaseStream` is everything the socket does, minus the socket. It wakes on a
``run.changed`` message from the channel layer (``base.sockets.run_changed``, called after ingest
commits) *or* on its own tick, so a missed notification — another process, Redis hiccup, a
counter frame that changes the measured gates without any ingest — costs at most one tick.
Each wake asks the run's incremental state (``state.RunPhaseState``) for its snapshot; an
unchanged run answers from its fingerprint without reading anything. The stream diffs the new
snapshot against the last one the browser *acknowledged* and sends only the difference
(``deltas.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from channels.db import database_sync_to_async

from fabricmon.core.phases.routing import Routing
from fabricmon.jobs.models import Run
from fabricmon.phases import services
from fabricmon.phases.deltas import delta_message, snapshot_message, split_message
from fabricmon.phases.state import PXN, PhaseSnapshot, StepWindow


@dataclass
class PhaseStream:
    """One browser's view of one run: snapshot on start, then deltas as the run changes."""

    run_id: int
    send_text: Callable[[dict[str, Any]], Awaitable[None]]
    routing: Routing = PXN
    window: StepWindow | None = None  # None: the run's newest steps; else a page of history
    tick_s: float = 2.0  # the consumer passes settings.FABRICMON_PHASES_TICK_S
    # at most one recompute per this many seconds per socket: a job posting 20 batches in a burst
    # nudges 20 times, and each recompute gates the whole run (~0.1-0.2 s at 256 GPUs); the nudges
    # that land meanwhile are coalesced into the next delta
    min_gap_s: float = 1.0
    seq: int = 0
    acked: int = 0
    sent: PhaseSnapshot | None = None  # what the browser holds once it acknowledges ``seq``
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sizes: list[int] = field(default_factory=list)  # bytes of every message sent (tests, bench)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def _compute(self) -> PhaseSnapshot:
        snap: PhaseSnapshot = await database_sync_to_async(_snapshot_of)(
            self.run_id, self.routing, self.window)
        return snap

    async def _send(self, msg: dict[str, Any]) -> None:
        text = json.dumps(msg, separators=(",", ":"))
        self.sizes.append(len(text.encode()))
        await self.send_text(msg)

    async def _send_parts(self, msg: dict[str, Any]) -> None:
        """One message, or several under Daphne's size limit, each with its own ``seq``."""
        for part in split_message(msg):
            self.seq += 1
            part["seq"] = self.seq
            await self._send(part)

    async def snapshot(self) -> None:
        snap = await self._compute()
        self.sent = snap
        await self._send_parts(dict(snapshot_message(snap, self.seq + 1, self.routing)))
        self.acked = self.seq - 1  # the snapshot's last part needs its ack before deltas flow

    async def follow(self) -> None:
        """Forever: wait for a nudge or the tick, send what changed when the client has room."""
        loop = asyncio.get_running_loop()
        async with self._lock:
            await self.snapshot()
        last = loop.time()
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.tick_s):
                    await self.wake.wait()
            if (rest := self.min_gap_s - (loop.time() - last)) > 0:
                await asyncio.sleep(rest)
            self.wake.clear()
            last = loop.time()
            async with self._lock:
                await self._flush()

    async def _flush(self) -> None:
        if self.sent is None or self.seq != self.acked:
            return  # the client is behind: the change waits and goes out as one delta
        snap = await self._compute()
        if snap is self.sent:  # unchanged fingerprint: the state answered with the same object
            return
        msg = delta_message(self.sent, snap, self.seq + 1)
        self.sent = snap
        if msg is None:
            return
        await self._send_parts(dict(msg))

    async def on_ack(self, seq: int) -> None:
        async with self._lock:
            if self.acked < seq <= self.seq:
                self.acked = seq
        self.wake.set()  # anything that waited for room goes now

    async def on_subscribe(self, routing: Routing) -> None:
        async with self._lock:
            self.routing = routing
            await self.snapshot()

    async def on_window(self, window: StepWindow | None) -> None:
        """Page to other steps (None: back to the newest); answered with a snapshot."""
        async with self._lock:
            self.window = window
            await self.snapshot()


def _snapshot_of(run_id: int, routing: Routing, window: StepWindow | None) -> PhaseSnapshot:
    run = Run.objects.get(pk=run_id)
    return services.phase_snapshot(run, routing, window=window)
