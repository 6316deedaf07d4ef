"""HTTP side of the probe: the ingest client, the clock-offset exchange and a background poster.

Stdlib only (urllib) so a training image needs nothing extra. The poster never blocks or raises
into the training loop: events go into a bounded buffer; when it is full, or the server is
unreachable, events are dropped and *counted* (``PosterStats``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

log = logging.getLogger(__name__)
_ENCODE = msgspec.json.Encoder().encode


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
        req = urllib.request.Request(self.base_url + path, data=body, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if body is not None:
            req.add_header("Content-Type", content_type)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def create_run(self, name: str, tags: list[str] | None = None, **extra: Any) -> int:
        status, body = self.request(
            "POST", "/jobs/api/runs", json.dumps({"name": name, "tags": tags or [], **extra}).encode()
        )
        if status != 201:
            raise RuntimeError(f"create run failed: {status} {body}")
        return int(body["id"])

    def post_events(self, run_id: int, ndjson: bytes, clock_offset_ns: int = 0) -> tuple[int, Any]:
        return self.request(
            "POST",
            f"/jobs/api/runs/{run_id}/events",
            ndjson,
            "application/x-ndjson",
            {"X-Clock-Offset-Ns": str(clock_offset_ns)},
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
    best: tuple[int, int] | None = None
    url = base_url.rstrip("/") + "/jobs/api/clock"
    for _ in range(samples):
        t0 = time.time_ns()
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            server_ns = int(json.loads(resp.read())["server_ns"])
        t1 = time.time_ns()
        rtt = t1 - t0
        offset = server_ns - (t0 + t1) // 2
        if best is None or rtt < best[1]:
            best = (offset, rtt)
    assert best is not None
    return best


@dataclass
class PosterStats:
    """What the poster did; ``dropped`` counts events lost to a full buffer or a failed post."""

    queued: int = 0
    posted: int = 0
    rejected: int = 0
    dropped: int = 0
    failed_posts: int = 0
    rate_limited: int = 0  # 429 answers: the batch went back to the buffer, posting paused


class EventPoster:
    """Posts event dicts as NDJSON batches from a daemon thread; bounded, never blocking."""

    def __init__(
        self,
        client: IngestClient,
        run_id: int,
        *,
        batch_size: int = 1_000,
        max_buffer: int = 100_000,
        flush_interval_s: float = 1.0,
        clock_resync_s: float = 60.0,
        measure_clock: bool = True,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.client, self.run_id = client, run_id
        self.max_backoff_s = max_backoff_s
        self.batch_size, self.max_buffer = batch_size, max_buffer
        self.flush_interval_s, self.clock_resync_s = flush_interval_s, clock_resync_s
        self.stats = PosterStats()
        self.clock_offset_ns = 0
        self.clock_rtt_ns: int | None = None
        self._measure_clock = measure_clock
        self._clock_at = 0.0
        self._buf: deque[dict[str, Any]] = deque()
        self._cond = threading.Condition()
        self._inflight = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="fabricmon-probe-poster", daemon=True)
        self._thread.start()

    def submit(self, event: dict[str, Any]) -> None:
        """Queue one event; O(1), never blocks on the network."""
        with self._cond:
            if len(self._buf) >= self.max_buffer or self._closed:
                self.stats.dropped += 1
                return
            self._buf.append(event)
            self.stats.queued += 1
            if len(self._buf) >= self.batch_size:
                self._cond.notify()

    __call__ = submit

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything queued has been posted (or dropped); True if it got there."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._cond.notify()
            while self._buf or self._inflight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
                self._cond.notify()
        return True

    def close(self, timeout_s: float = 10.0) -> PosterStats:
        self.flush(timeout_s)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout_s)
        return self.stats

    def _sync_clock(self) -> None:
        if not self._measure_clock or (
            time.monotonic() - self._clock_at < self.clock_resync_s and self._clock_at
        ):
            return
        self._clock_at = time.monotonic()
        try:
            self.clock_offset_ns, self.clock_rtt_ns = measure_clock_offset(
                self.client.base_url, timeout_s=2.0
            )
        except (OSError, ValueError, KeyError) as exc:  # keep the last offset; never crash training
            log.warning("probe: clock offset exchange failed: %s", exc)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._buf and not self._closed:
                    self._cond.wait(self.flush_interval_s)
                if self._closed and not self._buf:
                    return
                batch = [self._buf.popleft() for _ in range(min(self.batch_size, len(self._buf)))]
                self._inflight = len(batch)
            if batch:
                self._sync_clock()
                self._post(batch)
            with self._cond:
                self._inflight = 0
                self._cond.notify_all()

    def _back_off(self, batch: list[dict[str, Any]], answer: dict[str, Any]) -> None:
        """Rate limited: put the batch back in front (what does not fit is dropped and counted)
        and pause posting for the server's Retry-After, at most ``max_backoff_s``. Only this
        thread waits; ``submit`` keeps queueing (bounded) and never blocks."""
        self.stats.rate_limited += 1
        if self._closed:  # closing: no more waiting, what is left is dropped and counted
            self.stats.dropped += len(batch)
            return
        try:
            wait = min(max(float(answer.get("retry_after_s", 1)), 0.05), self.max_backoff_s)
        except (TypeError, ValueError):
            wait = 1.0
        with self._cond:
            room = max(self.max_buffer - len(self._buf), 0)
            keep = batch[:room]
            self.stats.dropped += len(batch) - len(keep)
            self._buf.extendleft(reversed(keep))
        log.warning("probe: rate limited by the server, posting again in %.1f s", wait)
        deadline = time.monotonic() + wait
        while not self._closed and time.monotonic() < deadline:
            time.sleep(min(0.05, max(deadline - time.monotonic(), 0)))

    def _post(self, batch: list[dict[str, Any]]) -> None:
        # msgspec: the same compact JSON, ~6x faster than json.dumps on 256-peer maps (this runs in
        # the training process, and in the twin beside its agents)
        body = b"\n".join(_ENCODE(e) for e in batch)
        try:
            status, answer = self.client.post_events(self.run_id, body, self.clock_offset_ns)
        except (TimeoutError, OSError) as exc:
            self.stats.dropped += len(batch)
            self.stats.failed_posts += 1
            log.warning("probe: server unreachable, dropped %d events: %s", len(batch), exc)
            return
        if status == 429 and isinstance(answer, dict):
            self._back_off(batch, answer)
            return
        if status >= 500 or not isinstance(answer, dict) or "accepted" not in answer:
            # a server error, or a refusal of the whole batch (token, run, size): counted, not kept
            self.stats.dropped += len(batch)
            self.stats.failed_posts += 1
            log.warning("probe: server answered %s, dropped %d events: %s", status, len(batch), answer)
            return
        self.stats.posted += int(answer.get("accepted", 0))
        self.stats.rejected += int(answer.get("rejected_count", 0))
        if answer.get("rejected"):
            log.warning(
                "probe: %s events rejected, first: %s", answer.get("rejected_count"), answer["rejected"][0]
            )
