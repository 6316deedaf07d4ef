"""A run's phase-view WebSocket: a thin shell over :class:`fabricmon.phases.stream.PhaseStream`.

Same rule as the JSON API (``views.run_api``), asked of ``base.access``: the run's owner or an
operator; anyone else gets 4404 as for a run that does not exist, 4401 if not logged in. Origin is checked by
``AllowedHostsOriginValidator`` in ``fabricmon/asgi.py``. The socket joins the run's channel-layer
group, so ingest's ``base.sockets.run_changed`` wakes it at once; its own tick covers the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from fabricmon.base import access
from fabricmon.base.sockets import CLOSE_SERVER_ERROR, run_group
from fabricmon.core.phases.routing import ROUTING_MODES, Routing
from fabricmon.jobs.models import Run
from fabricmon.phases.state import StepWindow
from fabricmon.phases.stream import PhaseStream

log = logging.getLogger(__name__)


class PhaseConsumer(AsyncWebsocketConsumer):
    stream: PhaseStream | None = None
    pump: asyncio.Task[None] | None = None
    group: str | None = None

    async def connect(self) -> None:
        # Refusals are accepted, then closed with the code: a handshake refused before accept
        # reaches the browser as a bare 1006, and the page could not tell "log in" from "retry".
        run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        refusal = await database_sync_to_async(self._refusal)(run_id)
        if refusal is not None:
            await self.accept()
            await self.close(code=refusal)
            return
        self.stream = PhaseStream(
            run_id,
            lambda msg: self.send(text_data=json.dumps(msg, separators=(",", ":"))),
            tick_s=settings.FABRICMON_PHASES_TICK_S,
        )
        if self.channel_layer is not None:
            self.group = run_group(run_id)
            await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        self.pump = asyncio.create_task(self._follow())

    def _refusal(self, run_id: int) -> int | None:
        user = self.scope.get("user")
        run = Run.objects.filter(pk=run_id).first() if user is not None and user.is_authenticated else None
        return access.run_socket_refusal(user, run)

    async def _follow(self) -> None:
        assert self.stream is not None
        try:
            await self.stream.follow()
        except asyncio.CancelledError:
            raise
        except Exception:  # database or Redis gone: close so the browser reconnects with backoff
            log.exception("phase stream of run %s failed", self.stream.run_id)
            await self.close(code=CLOSE_SERVER_ERROR)

    async def run_changed(self, event: dict[str, Any]) -> None:
        """``run.changed`` from ``base.sockets.run_changed``: look now instead of at the next tick."""
        if self.stream is not None:
            self.stream.wake.set()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.stream is None or text_data is None:
            return
        try:
            msg: dict[str, Any] = json.loads(text_data)
            if msg.get("type") == "ack":
                await self.stream.on_ack(int(msg["seq"]))
            elif msg.get("type") == "subscribe":
                mode = str(msg.get("routing", "pxn"))
                if mode not in ROUTING_MODES:
                    raise ValueError(f"routing must be one of {', '.join(ROUTING_MODES)}, got {mode!r}")
                await self.stream.on_subscribe(Routing(mode, int(msg.get("seed", 0))))  # type: ignore[arg-type]
            elif msg.get("type") == "window":
                live = msg.get("steps_from") is None
                page = None if live else StepWindow.page(int(msg["steps_from"]), int(msg["steps_to"]))
                await self.stream.on_window(page)
            else:
                raise ValueError(f"unknown message type {msg.get('type')!r}")
        except (ValueError, KeyError, TypeError) as exc:
            await self.send(text_data=json.dumps({"type": "error", "message": f"bad message: {exc}"}))

    async def disconnect(self, code: int) -> None:
        if self.pump is not None:
            self.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.pump
        if self.group is not None and self.channel_layer is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
