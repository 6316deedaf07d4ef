"""A TCP relay on 127.0.0.1 in front of the real Redis, whose connections can be cut.

    collector ──▶ RedisRelay (127.0.0.1:port) ──▶ Redis

What one collector sees when Redis stalls or restarts — its connections dropped, new ones refused
— while every other client of the same Redis goes on undisturbed (a fault for one process, not
for the parallel tests sharing the server).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.parse


class RedisRelay:
    def __init__(self, redis_url: str) -> None:
        parts = urllib.parse.urlsplit(redis_url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self.db_path = parts.path or "/0"
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cut_until = 0.0
        self.cuts = 0
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="relay-accept").start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}{self.db_path}"

    def cut(self, seconds: float) -> None:
        """Drop every open connection now and refuse new ones for ``seconds``."""
        with self._lock:
            self.cut_until = time.monotonic() + seconds
            self.cuts += 1
            doomed, self._open = self._open, []
        for s in doomed:
            _shut(s)

    def close(self) -> None:
        self._closed.set()
        self.cut(3600)
        _shut(self.listener)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if time.monotonic() < self.cut_until:
                _shut(client)  # refused: the client sees the connection closed at once
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=2)
            except OSError:
                _shut(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True, name="relay-pump").start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    _shut(src)
    _shut(dst)


def _shut(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
