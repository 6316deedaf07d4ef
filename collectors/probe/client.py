"""HTTP side of the probe: the ingest client and the clock-offset exchange (the background poster
is ``poster.EventPoster``).

Stdlib only (urllib) so a training image needs nothing extra.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple


class Answer(NamedTuple):
    """One HTTP answer: status, the body decoded as JSON (or text, or None) and the headers."""

    status: int
    body: Any
    headers: dict[str, str]


class IngestClient:
    """Synchronous calls to the jobs API with a bearer token (used by the poster and by scripts)."""

    def __init__(self, base_url: str, token: str, timeout_s: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def request(
        self,
        method: str,
        path: str,
        body: bytes | Iterable[bytes] | None = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """(status, decoded JSON body) — HTTP errors are returned, network errors raise OSError.
        An iterable body is sent as it comes (urllib streams it; give its Content-Length)."""
        answer = self.send(method, path, body, content_type, headers)
        return answer.status, answer.body

    def send(
        self,
        method: str,
        path: str,
        body: bytes | Iterable[bytes] | None = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> Answer:
        """``request`` with the answer's headers (Retry-After) and an optional per-call timeout
        (each socket operation's, as urllib's)."""
        req = urllib.request.Request(self.base_url + path, data=body, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if body is not None:
            req.add_header("Content-Type", content_type)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            timeout = self.timeout_s if timeout_s is None else timeout_s
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, raw, got = resp.status, resp.read(), dict(resp.headers.items())
        except urllib.error.HTTPError as exc:
            status, raw, got = exc.code, exc.read(), dict(exc.headers.items())
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode(errors="replace")
        return Answer(status, decoded, got)

    def create_run(self, name: str, tags: list[str] | None = None, **extra: Any) -> int:
        status, body = self.request(
            "POST", "/jobs/api/runs", json.dumps({"name": name, "tags": tags or [], **extra}).encode()
        )
        if status != 201:
            raise RuntimeError(f"create run failed: {status} {body}")
        return int(body["id"])

    def post_events(self, run_id: int, ndjson: bytes, clock_offset_ns: int = 0) -> tuple[int, Any]:
        answer = self.send_events(run_id, ndjson, clock_offset_ns)
        return answer.status, answer.body

    def send_events(
        self,
        run_id: int,
        ndjson: bytes,
        clock_offset_ns: int = 0,
        headers: dict[str, str] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> Answer:
        """POST one NDJSON batch; ``headers`` adds e.g. the poster's ``X-Probe-Dropped``."""
        return self.send(
            "POST",
            f"/jobs/api/runs/{run_id}/events",
            ndjson,
            "application/x-ndjson",
            {"X-Clock-Offset-Ns": str(clock_offset_ns), **(headers or {})},
            timeout_s=timeout_s,
        )

    def post_rank_map(self, run_id: int, entries: list[dict[str, Any]]) -> tuple[int, Any]:
        return self.request("POST", f"/jobs/api/runs/{run_id}/ranks", json.dumps(entries).encode())

    def upload_trace(
        self,
        run_id: int,
        kind: str,
        path: str | os.PathLike[str],
        rank: int | None = None,
        mode: str | None = None,
    ) -> tuple[int, Any]:
        """POST a trace file (``kind``: kineto, flight_recorder, nccl_inspector) as multipart form
        data, streamed from disk in 1 MiB pieces so a 200 MB trace never sits in memory. 200 with
        the counts when imported inline, 202 with a ``status_url`` when queued (``mode="queue"``
        asks for that whatever the size)."""
        path = Path(path)
        boundary = f"fabricmon{uuid.uuid4().hex}"
        fields = {"kind": kind}
        if rank is not None:
            fields["rank"] = str(rank)
        if mode:
            fields["mode"] = mode
        head = (
            b"".join(
                f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
                for k, v in fields.items()
            )
            + (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{path.name}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n"
            ).encode()
        )
        tail = f"\r\n--{boundary}--\r\n".encode()

        def pieces() -> Iterator[bytes]:
            yield head
            with path.open("rb") as f:
                while chunk := f.read(1 << 20):
                    yield chunk
            yield tail

        size = len(head) + path.stat().st_size + len(tail)
        return self.request(
            "POST",
            f"/jobs/api/runs/{run_id}/uploads",
            pieces(),
            f"multipart/form-data; boundary={boundary}",
            {"Content-Length": str(size)},
        )


def measure_clock_offset(base_url: str, samples: int = 5, timeout_s: float = 2.0) -> tuple[int, int]:
    """NTP-style: offset = server_ns - (t_send + t_recv)/2 from the sample with the smallest
    round trip. Returns (offset_ns, rtt_ns); add the offset to host times to get server time."""
    offset, rtt, _ = clock_exchange(base_url, samples, timeout_s)
    return offset, rtt


def clock_exchange(
    base_url: str, samples: int = 5, timeout_s: float = 2.0
) -> tuple[int, int, frozenset[str]]:
    """``measure_clock_offset``'s (offset_ns, rtt_ns), and the optional event fields the server
    reads (``event_fields`` of its answer; none from a server older than them)."""
    best: tuple[int, int] | None = None
    fields: frozenset[str] = frozenset()
    url = base_url.rstrip("/") + "/jobs/api/clock"
    for _ in range(samples):
        t0 = time.time_ns()
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            answer = json.loads(resp.read())
        t1 = time.time_ns()
        server_ns = int(answer["server_ns"])
        listed = answer.get("event_fields") if isinstance(answer, dict) else None
        fields = frozenset(f for f in listed if isinstance(f, str)) if isinstance(listed, list) else fields
        rtt = t1 - t0
        offset = server_ns - (t0 + t1) // 2
        if best is None or rtt < best[1]:
            best = (offset, rtt)
    assert best is not None
    return (*best, fields)
