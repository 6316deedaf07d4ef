"""Real local HTTP receivers on 127.0.0.1, a real Alertmanager, a record of every socket connect.

The SSRF guard refuses loopback by default; tests allow 127.0.0.1 explicitly through the same
setting an admin would use (FABRICMON_ALERTS_ALLOW_HOSTS)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.alerts.connects import CONNECTS  # noqa: F401  (installs the audit hook for every test here)


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes
    clock: float  # the test's simulated clock when the request arrived
    arrived: float = field(default_factory=time.time)  # … and the wall clock's

    def json(self) -> object:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A recording HTTP server. ``respond(seen) -> (status, headers, body)`` decides each answer."""

    port: int
    requests: list[Seen] = field(default_factory=list)
    respond: Callable[[Seen], tuple[int, dict[str, str], bytes]] = lambda s: (200, {}, b"ok")
    clock: float = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver(port=0)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen = Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body, state.clock)
            state.requests.append(seen)
            status, headers, out = state.respond(seen)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_POST  # noqa: N815 (http.server dispatches on this name)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def allow_loopback(settings):
    settings.FABRICMON_ALERTS_ALLOW_HOSTS = ["127.0.0.1"]
    return settings


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """A real prometheus-alertmanager (Debian) on free loopback ports, no clustering."""
    binary = Path("/usr/bin/prometheus-alertmanager")
    if not binary.exists():
        pytest.fail("needs Debian's prometheus-alertmanager: apt-get install -y prometheus-alertmanager")
    cfg = tmp_path / "am.yml"
    cfg.write_text("route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n")
    port = _free_port()
    log = open(tmp_path / "am.log", "w")  # noqa: SIM115 (closed after the process ends)
    proc = subprocess.Popen(
        [
            str(binary),
            f"--config.file={cfg}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                with urllib.request.urlopen(base + "/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"alertmanager exited: {(tmp_path / 'am.log').read_text()[-2000:]}")
                time.sleep(0.05)
        else:
            pytest.fail("alertmanager did not become ready")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
