"""Limits on request bodies, applied before the body is read: its size (by Content-Length, and by
the bytes actually streamed when there is none) and, on the ingest API, a valid bearer token.

Issue 13 measured why this cannot wait for the view: an unauthenticated 2 GB POST to ``/events``
got its 401 after 10.4 s with the server at 2.2 GB RSS, because the body was buffered before
anything was checked. ``head_verdict`` is the policy (pure: method, path, headers → refuse or go
on, and the byte limit); ``BodyGuard`` applies it as an ASGI middleware in front of Django for any
server that streams bodies; ``fabricmon.serve`` applies it inside Daphne, which reads the whole
body before it calls the application at all.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import orjson
from channels.db import database_sync_to_async
from django.conf import settings

from fabricmon.jobs.tokens import authenticate_token

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_API = re.compile(r"^/jobs/api/")
_OPEN_API = frozenset({"/jobs/api/openapi.json", "/jobs/api/clock"})  # no token: reveal nothing
_EVENTS = re.compile(r"^/jobs/api/runs/\d+/events$")
_UPLOADS = re.compile(r"^/jobs/(api/)?runs/\d+/uploads?$")


@dataclass(frozen=True)
class Verdict:
    """What the head of a request decides: ``refuse`` as (status, reason, field), or go on with
    at most ``max_bytes`` of body, after a token check when ``token`` is set."""

    max_bytes: int
    token: str | None = None
    refuse: tuple[int, str, str] | None = None


def body_limit(path: str) -> int:
    """Bytes a request body to ``path`` may have."""
    if _EVENTS.match(path):
        return int(settings.FABRICMON_INGEST_MAX_BYTES)
    if _UPLOADS.match(path):
        return int(settings.FABRICMON_UPLOAD_MAX_BYTES)
    if _API.match(path):
        return int(settings.FABRICMON_API_MAX_JSON_BYTES)
    return int(settings.FABRICMON_MAX_BODY_BYTES)


def head_verdict(method: str, path: str, headers: dict[str, str]) -> Verdict:
    """The policy for one request head (``headers`` with lower-case names)."""
    limit = body_limit(path)
    length_text = headers.get("content-length")
    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    length = 0
    if length_text is not None:
        if not (length_text.isascii() and length_text.isdigit()) or len(length_text) > 19:
            return Verdict(limit, refuse=(400, "Content-Length must be a number of bytes", "Content-Length"))
        length = int(length_text)
    token: str | None = None
    if (length or chunked) and _API.match(path) and path not in _OPEN_API:
        # who is asking comes first: an anonymous client learns nothing about the limits
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return Verdict(limit, refuse=(401, "missing API token: send 'Authorization: Bearer <token>'",
                                          "Authorization"))
        token = given.strip()
    if length > limit:
        return Verdict(limit, refuse=(413, f"body of {length} bytes is over the limit of {limit} bytes "
                                           f"for {path}", "body"))
    return Verdict(limit, token=token)  # no body, or not the ingest API: no token check here


def token_is_valid(token: str) -> bool:
    return authenticate_token(token, touch=False) is not None


def refusal_body(status: int, reason: str, field: str) -> bytes:
    return orjson.dumps({"error": reason, "field": field})


def too_large(limit: int) -> tuple[int, str, str]:
    return 413, f"body over the limit of {limit} bytes", "body"


class BodyGuard:
    """ASGI middleware: refuses by the head before calling the app (so before any body byte is
    read), and cuts a streamed body off at its limit with a 413."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        verdict = head_verdict(scope["method"], scope["path"], headers)
        refuse = verdict.refuse
        if refuse is None and verdict.token is not None and not await database_sync_to_async(
            token_is_valid
        )(verdict.token):
            refuse = (401, "invalid or revoked API token", "Authorization")
        if refuse is not None:
            await _answer(send, *refuse)
            return
        seen = 0
        answered = False

        async def counted() -> Message:
            nonlocal seen, answered
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > verdict.max_bytes:
                    if not answered:
                        answered = True
                        await _answer(send, *too_large(verdict.max_bytes))
                    return {"type": "http.disconnect"}  # the app stops reading: the client is gone to it
            return message

        async def guarded_send(message: Message) -> None:
            if not answered:
                await send(message)

        await self.app(scope, counted, guarded_send)


async def _answer(send: Send, status: int, reason: str, field: str) -> None:
    headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": refusal_body(status, reason, field)})
