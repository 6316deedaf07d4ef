"""``python -m fabricmon.serve`` — Daphne (same arguments) with the body limits applied while the
request is still arriving.

Daphne (Twisted) reads a whole request body — into a temporary file, then every byte of it into
the application's queue — before it calls the application, so an ASGI middleware sees a 2 GB
POST only after it was paid for (issue 13: 10.4 s, 2.2 GB RSS for an unauthenticated one). Here
Twisted's request is told the verdict of ``body_guard.head_verdict`` as soon as the head is in
(``gotLength``): a refusal is answered at once and the connection closed without reading the body;
a token is checked in a thread while the connection is paused; a body without Content-Length is
cut off at its limit as it streams. ``fabricmon.jobs.body_guard.BodyGuard`` stays in front of
Django for servers that stream bodies themselves.

  client ──head──▶ GuardedRequest.gotLength ──refuse──▶ 401/413, close (no body read)
                          │ go on (token checked in a thread, transport paused meanwhile)
                          ▼
                   body chunks (counted) ──▶ Daphne ──▶ fabricmon.asgi (BodyGuard ▶ Django)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fabricmon.settings")

import django

django.setup()

from daphne import server as daphne_server  # noqa: E402
from daphne.cli import CommandLineInterface  # noqa: E402
from daphne.http_protocol import HTTPFactory, WebRequest  # noqa: E402
from django.db import close_old_connections  # noqa: E402
from twisted.internet import threads  # noqa: E402

from fabricmon.jobs import body_guard  # noqa: E402

_REASONS = {400: b"Bad Request", 401: b"Unauthorized", 413: b"Content Too Large"}


def _checked_token(token: str) -> bool:
    """In a Twisted worker thread (the ORM must not run on the reactor's event loop)."""
    try:
        return body_guard.token_is_valid(token)
    finally:
        close_old_connections()


class _Writable:
    """A streaming (push) producer registered on one response: Twisted pauses it when the
    connection's send buffer is full and resumes it when the buffer drains; ``ready`` is set while
    the next chunk may go."""

    def __init__(self, paused: bool) -> None:
        self.ready = asyncio.Event()
        if not paused:
            self.ready.set()

    def pauseProducing(self) -> None:  # noqa: N802  (Twisted's IPushProducer)
        self.ready.clear()

    def resumeProducing(self) -> None:  # noqa: N802
        self.ready.set()

    def stopProducing(self) -> None:  # noqa: N802  (the connection is going: stop waiting)
        self.ready.set()


DRAIN_CHECK_S = 1.0  # a paused wait looks this often whether the client went away


class GuardedRequest(WebRequest):  # type: ignore[misc]
    """Daphne's request with ``body_guard``'s verdict applied before the body is read."""

    # Twisted would read a whole form or multipart body into memory and parse it itself (answering
    # a bare 400 on what it cannot parse) before Daphne hands the body on; Django parses it anyway,
    # streaming uploads to disk
    _refused = False
    _received = False
    _limit: int | None = None
    _seen = 0
    _writable: _Writable | None = None  # a streamed response's producer (``drained``)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._parsePOSTFormSubmission = False  # (Twisted sets it per instance)

    def gotLength(self, length: int | None) -> None:  # noqa: N802  (Twisted's name)
        # the request line is parsed by now (the channel's _command/_path); the headers too
        method = (getattr(self.channel, "_command", b"") or b"").decode("latin-1")
        path = (getattr(self.channel, "_path", b"") or b"").decode("latin-1").split("?", 1)[0]
        headers = {
            k.decode("latin-1").lower(): b",".join(v).decode("latin-1")
            for k, v in self.requestHeaders.getAllRawHeaders()
        }
        verdict = body_guard.head_verdict(method, path, headers)
        if verdict.refuse is not None:
            self._refuse(*verdict.refuse)
            return
        self._limit = verdict.max_bytes
        super().gotLength(length)
        if verdict.token is not None:
            transport = self.channel.transport
            transport.pauseProducing()  # no body bytes are read until the token is known
            done = threads.deferToThread(_checked_token, verdict.token)

            def decided(ok: bool) -> None:
                # a body small enough to have come with the head is with Django already, whose
                # own token check answers it
                if not ok and not self._received:
                    self._refuse(401, "invalid or revoked API token", "Authorization")
                elif not self._refused:
                    transport.resumeProducing()

            done.addCallbacks(decided, lambda _: self._refuse(401, "API token check failed", "Authorization"))

    def handleContentChunk(self, data: bytes) -> None:  # noqa: N802
        if self._refused:
            return
        self._seen += len(data)
        if self._limit is not None and self._seen > self._limit:
            self._refuse(*body_guard.too_large(self._limit))
            return
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:  # noqa: N802
        if not self._refused:
            self._received = True
            super().requestReceived(command, path, version)

    def _refuse(self, status: int, reason: str, field: str) -> None:
        """Answer on the raw transport (the request was never handed to Twisted's response
        machinery) and close: the body the client is still sending is never read."""
        if self._refused:
            return
        self._refused = True
        body = body_guard.refusal_body(status, reason, field)
        head = [
            b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b"Refused")),
            b"Content-Type: application/json",
            b"Content-Length: %d" % len(body),
            b"Connection: close",
        ]
        if status == 401:
            head.append(b"WWW-Authenticate: Bearer")
        transport = self.channel.transport
        if transport is None:
            return
        transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        transport.resumeProducing()  # let loseConnection flush (it may have been paused above)
        transport.loseConnection()


    async def drained(self) -> None:
        """Return once this response's send buffer has room for the next chunk of a streamed
        body (``FlowControlledServer``), or the connection is gone."""
        if self.finished or self.channel is None:
            return
        if self._writable is None:
            self._writable = _Writable(paused=bool(getattr(self.channel, "_waitingForTransport", False)))
            self.registerProducer(self._writable, True)
        while not self._writable.ready.is_set() and not self.finished and self.channel is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DRAIN_CHECK_S):
                    await self._writable.ready.wait()

    def stop_streaming(self) -> None:
        """Before the last body: no producer is left registered when Twisted finishes."""
        if self._writable is not None and self.channel is not None:
            self.unregisterProducer()
        self._writable = None


class GuardedHTTPFactory(HTTPFactory):  # type: ignore[misc]
    def buildProtocol(self, addr: Any) -> Any:  # noqa: N802
        protocol = super().buildProtocol(addr)
        if protocol is not None:
            protocol.requestFactory = GuardedRequest
        return protocol


class FlowControlledServer(daphne_server.Server):  # type: ignore[misc]
    """Daphne with back-pressure on response bodies. Daphne writes each ``http.response.body``
    into Twisted's send buffer and returns at once (daphne#170), so a streamed response to a client
    that reads slower than the server produces — the events export to a slow link, or to a client
    on a busy machine — piled up in the server's memory (CI: +49 MB of a 73 MB export). Here a
    body message with more to come returns only once the send buffer has drained below Twisted's
    high-water mark, so the server holds about one chunk per slow client."""

    async def handle_reply(self, protocol: Any, message: dict[str, Any]) -> None:
        body = message.get("type") == "http.response.body" and isinstance(protocol, GuardedRequest)
        more = body and message.get("more_body", False)
        if body and not more:
            protocol.stop_streaming()  # (the last body: Twisted finishes the request after it)
        await super().handle_reply(protocol, message)
        if more:
            await protocol.drained()


class FlowControlledCLI(CommandLineInterface):  # type: ignore[misc]
    server_class = FlowControlledServer


def take_nice(argv: list[str]) -> tuple[int, list[str]]:
    """``--nice N`` (ours; the rest is Daphne's): serve at a lower CPU priority — an ingest server
    (``fabricmon.demo``'s and compose's ``ingest``) on a host whose collectors must never wait; its
    jobs' spools hold what it cannot take yet (docs/deploy.md: on the saturated scale box at 10,
    14 % of a job's burst was stored). A whole process, not a thread: nice is per thread on Linux,
    and a low-priority thread holding the GIL stalls the pages beside it."""
    ap = argparse.ArgumentParser(prog="fabricmon.serve", add_help=False, allow_abbrev=False)
    ap.add_argument("--nice", type=int, default=0)
    known, rest = ap.parse_known_args(argv)
    if not 0 <= known.nice <= 19:
        raise SystemExit(f"fabricmon.serve: --nice must be 0-19 (a lower priority), got {known.nice}")
    return known.nice, rest


def lower_priority(nice: int) -> None:
    """Every thread of this process ``nice`` steps lower, before the reactor and its thread pool
    start (each new thread inherits its creator's value). Each thread by its id: on Linux the
    value is per thread, and importing the application has started threads already."""
    target = min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice)
    tasks = Path("/proc/self/task")
    for tid in [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]:
        with contextlib.suppress(ProcessLookupError):  # (a thread that ended meanwhile)
            os.setpriority(os.PRIO_PROCESS, tid, target)
    print(f"fabricmon.serve: serving at nice {target}", flush=True)


def main(argv: list[str] | None = None) -> None:
    nice, rest = take_nice(sys.argv[1:] if argv is None else argv)
    if nice:
        lower_priority(nice)
    # Daphne's Server.run builds its factory from this module name: the one seam it offers
    daphne_server.HTTPFactory = GuardedHTTPFactory
    FlowControlledCLI().run(rest)


if __name__ == "__main__":
    main()
