"""The fabric heatmap WebSocket: a thin shell over :class:`fabricmon.live.stream.FabricStream`.

Origin is checked by ``AllowedHostsOriginValidator`` in ``fabricmon/asgi.py``; here ``base.access``
decides: a refused socket is accepted, then closed with 4401 (log in) or 4403 (no role), because a
handshake refused before accept reaches the browser as a bare 1006 and the page could not tell
"log in" from "retry". A run's markers are sent only to a user who may see that run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Coroutine
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from fabricmon.base import access
from fabricmon.base.connections import connect_async
from fabricmon.base.sockets import CLOSE_SERVER_ERROR, CLOSE_TOO_SLOW
from fabricmon.jobs.models import Run
from fabricmon.live import wire
from fabricmon.live.incidents import IncidentFeed
from fabricmon.live.services import DEFAULT_WINDOW_S, window_seconds
from fabricmon.live.stream import ClientStalledError, FabricStream
from fabricmon.phases.markers import MarkerFeed

log = logging.getLogger(__name__)


class FabricConsumer(AsyncWebsocketConsumer):
    # No channel layer: frames come straight from the Redis stream (XREAD), so a socket costs no
    # per-consumer channel and no second blocking Redis read. An unknown alias means "none".
    channel_layer_alias = "fabricmon.live:no-channel-layer"
    stream: FabricStream | None = None
    pump: asyncio.Task[None] | None = None
    markers: asyncio.Task[None] | None = None  # the selected run's phase markers (MarkerFeed)
    incidents: asyncio.Task[None] | None = None  # open incast episodes drawn over the heatmap

    async def connect(self) -> None:
        user = self.scope.get("user")
        refusal = await database_sync_to_async(access.socket_refusal)(user, access.Role.VIEWER)
        if refusal is not None:
            await self.accept()
            await self.close(code=refusal)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode())
        metric = query.get("metric", [wire.DEFAULT_METRIC])[0]
        if metric not in wire.METRIC_IDS:
            metric = wire.DEFAULT_METRIC
        try:  # like an unknown metric: a window the page never sends falls back to the default
            window_s = window_seconds(query.get("window_s", [""])[0])
        except ValueError:
            window_s = DEFAULT_WINDOW_S
        self.stream = FabricStream(
            r=connect_async(),
            fabric=self.scope["url_route"]["kwargs"]["fabric"],
            metric=metric,
            window_s=max(window_s, 10.0),
            scale_kind=kind if (kind := query.get("scale", ["linear"])[0]) in wire.SCALE_KINDS else "linear",
            send_text=lambda msg: self.send(text_data=json.dumps(msg)),
            send_bytes=lambda blob: self.send(bytes_data=blob),
        )
        await self.accept()
        self.pump = asyncio.create_task(self._follow())
        stream = self.stream
        feed = IncidentFeed(
            stream.fabric,
            lambda msg: self.send(text_data=json.dumps(msg)),
            lambda: max(0, stream.newest_ts_ns - int(stream.window_s * 1e9)) if stream.newest_ts_ns else 0,
            tick_s=settings.FABRICMON_PHASES_TICK_S,
        )
        self.incidents = asyncio.create_task(self._overlay(feed.follow(), "incident overlay"))

    async def _follow(self) -> None:
        assert self.stream is not None
        try:
            await self.stream.follow()
        except ClientStalledError:
            await self.close(code=CLOSE_TOO_SLOW)
        except asyncio.CancelledError:
            raise
        except Exception:  # Redis gone, bad frame: close so the browser reconnects with backoff
            log.exception("live stream for %s failed", self.stream.fabric)
            await self.close(code=CLOSE_SERVER_ERROR)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.stream is None or text_data is None:
            return
        try:
            msg: dict[str, Any] = json.loads(text_data)
            if msg.get("type") == "ack":
                await self.stream.on_ack(int(msg["seq"]))
            elif msg.get("type") == "subscribe":
                await self.stream.on_subscribe(str(msg["metric"]), msg.get("scale"))
            elif msg.get("type") == "markers":
                await self._select_run(None if msg.get("run") in (None, "") else int(msg["run"]))
        except (ValueError, KeyError, TypeError) as exc:
            await self.send(text_data=json.dumps({"type": "error", "message": f"bad message: {exc}"}))

    async def _select_run(self, run_id: int | None) -> None:
        """Follow one run's phase markers on this socket (None: none); a new choice resets."""
        await self._stop(self.markers)
        self.markers = None
        if run_id is None or self.stream is None:
            return
        if not await database_sync_to_async(self._may_see_run)(run_id):
            await self.send(text_data=json.dumps({"type": "error", "message": f"no run {run_id}"}))
            return
        stream = self.stream
        feed = MarkerFeed(
            run_id,
            stream.fabric,
            lambda msg: self.send(text_data=json.dumps(msg)),
            lambda: max(0, stream.newest_ts_ns - int(stream.window_s * 1e9)) if stream.newest_ts_ns else 0,
            tick_s=settings.FABRICMON_PHASES_TICK_S,
        )
        self.markers = asyncio.create_task(self._overlay(feed.follow(), f"phase markers of run {run_id}"))

    def _may_see_run(self, run_id: int) -> bool:
        run = Run.objects.filter(pk=run_id).first()
        return run is not None and access.can_see_run(self.scope["user"], run)

    async def _overlay(self, follow: Coroutine[Any, Any, None], what: str) -> None:
        try:
            await follow
        except asyncio.CancelledError:
            raise
        except Exception:  # an overlay: report it, keep the heatmap streaming
            log.exception("%s failed", what)
            failed = {"type": "error", "message": f"{what} failed; reload the page"}
            await self.send(text_data=json.dumps(failed))

    @staticmethod
    async def _stop(task: asyncio.Task[None] | None) -> None:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def disconnect(self, code: int) -> None:
        await self._stop(self.markers)
        await self._stop(self.incidents)
        if self.pump is not None:
            self.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.pump
        if self.stream is not None:
            await self.stream.r.aclose()
