"""A hostile HTTP receiver on 127.0.0.1: a real TCP server (one thread per connection) that reads
each request whole, records it, then answers however the test says — dripped a byte at a time,
hundreds of megabytes long, or not HTTP at all.

    delivery ──TCP──▶ RawReceiver ─ reads head + Content-Length body, records an Exchange
                                  └ answer(conn, exchange): writes whatever it likes
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Exchange:
    head: bytes
    body: bytes
    headers: dict[str, str]
    opened_at: float  # time.monotonic() when the request was in
    closed_at: float | None = None  # … and when the connection ended (either side)
    bytes_sent: int = 0  # what the answer got into the kernel before the client hung up
    client_gone: bool = False  # the client closed the connection before the answer was complete

    @property
    def held_s(self) -> float | None:
        return None if self.closed_at is None else self.closed_at - self.opened_at


Answer = Callable[[socket.socket, Exchange], None]


@dataclass
class RawReceiver:
    answer: Answer
    exchanges: list[Exchange] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def webhook_ids(self) -> list[str]:
        return [x.headers.get("webhook-id", "") for x in self.exchanges]

    def wait_for_requests(self, n: int, timeout_s: float = 30.0) -> None:
        end = time.monotonic() + timeout_s
        while len(self.exchanges) < n:
            assert time.monotonic() < end, f"receiver saw {len(self.exchanges)} requests, wanted {n}"
            time.sleep(0.02)

    def stop(self) -> None:
        self.stopping.set()
        self.server.close()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
            while len(body) < int(headers.get("content-length", "0")):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                body += chunk
            exchange = Exchange(head, body, headers, opened_at=time.monotonic())
            self.exchanges.append(exchange)
            try:
                self.answer(conn, exchange)
            except OSError:  # the client hung up: exactly what a capped or timed-out delivery does
                exchange.client_gone = True
            exchange.closed_at = time.monotonic()


def drip(data: bytes, every_s: float, stop: threading.Event) -> Answer:
    """Send ``data`` one byte every ``every_s`` seconds."""

    def answer(conn: socket.socket, x: Exchange) -> None:
        for i in range(len(data)):
            conn.sendall(data[i : i + 1])
            x.bytes_sent += 1
            end = time.monotonic() + every_s
            while (left := end - time.monotonic()) > 0:  # wait, but see the client hang up at once
                if stop.is_set():
                    return
                readable, _, _ = select.select([conn], [], [], min(left, 0.25))
                if readable and not conn.recv(1):
                    x.client_gone = True
                    return

    return answer


def huge(head: bytes, total_bytes: int) -> Answer:
    """A head, then zeros until ``total_bytes`` were sent or the client hung up."""

    def answer(conn: socket.socket, x: Exchange) -> None:
        conn.sendall(head)
        block = bytes(1 << 16)
        while x.bytes_sent < total_bytes:
            conn.sendall(block)
            x.bytes_sent += len(block)

    return answer


def raw(data: bytes) -> Answer:
    """Send ``data`` and close: garbage, a truncated answer, or nothing at all (``b""``)."""

    def answer(conn: socket.socket, x: Exchange) -> None:
        conn.sendall(data)
        x.bytes_sent = len(data)

    return answer
