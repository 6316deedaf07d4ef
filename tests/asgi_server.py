"""A real Daphne server for integration tests (own SQLite file, real Redis), a session cookie from
its real login form, and a small RFC 6455 client over asyncio streams — the browser's side of a
WebSocket without a browser (masking, fragmentation, ping/close as the RFC says).

Daphne is handed an already-bound listening socket (``--fd``), so parallel workers never race
for a port. Used by tests/e2e (conftest) and tests/phases.
"""

from __future__ import annotations

import asyncio
import base64
import http.cookiejar
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import secret_env  # tests/secret_env.py (this folder is on sys.path wherever this module is imported)

ROOT = Path(__file__).resolve().parents[1]


def manage(env: dict[str, str], *args: str, stdin: bytes | None = None, timeout: float = 180) -> str:
    """``manage.py`` with ``env`` in a subprocess; its stdout, or an AssertionError with its output."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode:
        raise AssertionError(
            f"manage.py {' '.join(args)} failed:\n{done.stdout.decode()}\n{done.stderr.decode()[-3000:]}"
        )
    return done.stdout.decode()


@dataclass
class LiveServer:
    url: str
    env: dict[str, str]
    proc: subprocess.Popen[bytes]

    def forget_fabric(self, name: str) -> None:
        """Delete a test's fabric, so later tests' collectors do not spend leases polling it."""
        self.manage(
            "shell",
            "-c",
            f"from fabricmon.topology.models import Fabric; Fabric.objects.filter(name={name!r}).delete()",
        )

    def manage(self, *args: str, stdin: bytes | None = None) -> str:
        return manage(self.env, *args, stdin=stdin, timeout=120)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def server_env(tmp: Path, redis_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "fabricmon.settings",
            "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
            "REDIS_URL": redis_url,
            "FABRICMON_VAR_DIR": str(tmp),
            "PYTHONUNBUFFERED": "1",
            **extra,
        }
    )
    secret_env.apply(env)  # the product refuses to start without a SECRET_KEY (DEBUG off)
    return env


def start_daphne(env: dict[str, str], log: Path, port: int = 0,
                 serve_args: tuple[str, ...] = ()) -> tuple[subprocess.Popen[bytes], str]:
    """Daphne on a free loopback port (or ``port``: a restart where clients already point);
    ``serve_args``: fabricmon.serve's own options (``--nice``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabricmon.serve", *serve_args, "--fd", str(sock.fileno()),
         "fabricmon.asgi:application"],
        env=env,
        cwd=ROOT,
        pass_fds=[sock.fileno()],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    sock.close()  # the child holds its own copy
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{url}/accounts/login/", timeout=2) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"daphne did not come up; log:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def live_server(tmp: Path, redis_url: str, serve_args: tuple[str, ...] = (), **extra_env: str) -> LiveServer:
    """Migrate a fresh SQLite database and start Daphne on it."""
    env = server_env(tmp, redis_url, **extra_env)
    manage(env, "migrate", "--noinput")
    proc, url = start_daphne(env, tmp / "daphne.log", serve_args=serve_args)
    return LiveServer(url=url, env=env, proc=proc)


def session_cookie(server: LiveServer, username: str, password: str) -> str:
    """Log in through the real form (CSRF and all); returns ``sessionid=…`` for a Cookie header."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(f"{server.url}/accounts/login/") as resp:
        form = resp.read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    assert token, "login form without a CSRF token"
    body = urllib.parse.urlencode(
        {"username": username, "password": password, "csrfmiddlewaretoken": token.group(1)}
    )
    req = urllib.request.Request(
        f"{server.url}/accounts/login/",
        data=body.encode(),
        headers={"Referer": f"{server.url}/accounts/login/"},
    )
    opener.open(req).close()
    session = next((c.value for c in jar if c.name == "sessionid"), None)
    assert session, "login did not set a session cookie"
    return f"sessionid={session}"


def get_json(server: LiveServer, path: str, cookie: str) -> Any:
    req = urllib.request.Request(f"{server.url}{path}", headers={"Cookie": cookie})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


class WebSocketClosedError(Exception):
    def __init__(self, code: int | None) -> None:
        super().__init__(f"closed with code {code}")
        self.code = code


class WebSocket:
    """A minimal client: text messages in and out, close codes surfaced as ``WebSocketClosedError``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.received_bytes: list[int] = []  # payload size of every message received

    @classmethod
    async def connect(cls, url: str, *, cookie: str | None = None, origin: str | None = None) -> WebSocket:
        u = urllib.parse.urlsplit(url)
        reader, writer = await asyncio.open_connection(u.hostname, u.port)
        key = base64.b64encode(os.urandom(16)).decode()
        head = [
            f"GET {u.path}{'?' + u.query if u.query else ''} HTTP/1.1",
            f"Host: {u.hostname}:{u.port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
        ]
        if origin:
            head.append(f"Origin: {origin}")
        if cookie:
            head.append(f"Cookie: {cookie}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        status = await reader.readline()
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        if b" 101 " not in status:
            writer.close()
            raise WebSocketClosedError(None)
        return cls(reader, writer)

    async def send(self, msg: dict[str, Any]) -> None:
        data = json.dumps(msg).encode()
        mask = os.urandom(4)
        n = len(data)
        head = bytes([0x81]) + (
            bytes([0x80 | n])
            if n < 126
            else bytes([0x80 | 126]) + struct.pack(">H", n)
            if n < 65536
            else bytes([0x80 | 127]) + struct.pack(">Q", n)
        )
        self.writer.write(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))
        await self.writer.drain()

    async def _frame(self) -> tuple[bool, int, bytes]:
        b0, b1 = await self.reader.readexactly(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", await self.reader.readexactly(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", await self.reader.readexactly(8))[0]
        mask = await self.reader.readexactly(4) if b1 & 0x80 else b""
        data = await self.reader.readexactly(n)
        if mask:
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        return bool(b0 & 0x80), b0 & 0x0F, data

    async def receive(self, timeout: float = 60, *, skip_binary: bool = False) -> dict[str, Any]:
        """The next text message as JSON (pings answered, a close raised; binary messages, e.g.
        the fabric socket's columns, passed over with ``skip_binary``)."""
        parts: list[bytes] = []
        binary = False
        while True:
            try:
                fin, op, data = await asyncio.wait_for(self._frame(), timeout)
            except asyncio.IncompleteReadError as exc:
                raise WebSocketClosedError(None) from exc
            if op == 0x8:
                raise WebSocketClosedError(struct.unpack(">H", data[:2])[0] if len(data) >= 2 else None)
            if op == 0x9:
                self.writer.write(bytes([0x8A, 0x80 | len(data)]) + b"\0\0\0\0" + data)
                continue
            if op in (0x1, 0x2, 0x0):
                if op != 0x0:
                    binary = op == 0x2
                parts.append(data)
                if fin:
                    payload = b"".join(parts)
                    self.received_bytes.append(len(payload))
                    parts = []
                    if binary and skip_binary:
                        continue
                    return json.loads(payload)

    async def close(self) -> None:
        self.writer.write(bytes([0x88, 0x82]) + b"\0\0\0\0" + struct.pack(">H", 1000))
        self.writer.close()
