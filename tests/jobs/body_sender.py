"""A client that sends a big request body the way an attacker would — as fast as the socket takes
it — while watching for the server's answer, so a server that answers before reading the body is
seen to (http.client would block in ``send`` until the whole body is out). Used by
tests/jobs/test_body_guard.py and bench/body_guard.py."""

from __future__ import annotations

import select
import socket
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

CHUNK = b"x" * (1 << 20)


@dataclass
class Answer:
    status: int
    body: bytes
    seconds: float  # from the first byte sent to the answer's status line
    sent_bytes: int


def post_body(url: str, path: str, size: int, headers: dict[str, str] | None = None, *,
              chunked: bool = False, timeout_s: float = 120) -> Answer:
    u = urllib.parse.urlsplit(url)
    sock = socket.create_connection((u.hostname, u.port), timeout=timeout_s)
    head = [f"POST {path} HTTP/1.1", f"Host: {u.hostname}:{u.port}", "Content-Type: application/x-ndjson"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}")
    t0 = time.perf_counter()
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    sock.settimeout(2.0)  # a server that stops reading without answering ends the sending
    sent, got, answered_at = 0, b"", None
    deadline = t0 + timeout_s
    sending = True
    while time.perf_counter() < deadline:
        readable, _, _ = select.select([sock], [], [], 0 if sending else 1.0)
        if readable:
            try:
                data = sock.recv(65536)
            except OSError:
                break
            if answered_at is None:
                answered_at = time.perf_counter()
            if not data:
                break
            got += data
            if _complete(got):
                break
            continue
        if not sending:
            continue
        piece = CHUNK[: min(len(CHUNK), size - sent)]
        try:
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            sent += len(piece)
            if sent >= size:
                sending = False
                if chunked:
                    sock.sendall(b"0\r\n\r\n")
        except OSError:  # closed, reset or stalled: read what the server answered
            sending = False
    sock.close()
    if not got:
        raise AssertionError(f"no answer after sending {sent} bytes")
    status = int(got.split(b" ", 2)[1])
    body = got.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in got else b""
    return Answer(status, body, (answered_at or time.perf_counter()) - t0, sent)


def _complete(raw: bytes) -> bool:
    if b"\r\n\r\n" not in raw:
        return False
    head, body = raw.split(b"\r\n\r\n", 1)
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux ≥ 4.0)
