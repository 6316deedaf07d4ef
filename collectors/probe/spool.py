"""The probe's spool: encoded events waiting for the server, bounded in events and in bytes.

::

    submit ──▶ [ waiting: oldest … newest ] ──take()──▶ [ in flight ] ──done()──▶ gone
                    ▲ full: the oldest waiting event is dropped (counted)      │ failed, retryable:
                    └──────────────────── the in-flight batch is kept and posted again

The in-flight batch counts toward the bound but is never dropped from under its request (its
events may already be stored: dropping and counting them would over-count). When the spool is
full the *oldest* waiting event goes: the newest steps are what the run page, the phase sockets
(windowed to the newest steps) and the fabric heatmap show, and a job past an outage cares about
now — the choice Prometheus remote-write makes too (after an outage longer than its WAL it resumes
with recent data, the oldest is what is lost). Each line carries a tag (its ``journal`` segment,
-1 without one) handed to ``release`` when the line leaves for good. Not thread-safe: the poster
holds its lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

Release = Callable[[list[int]], None]


def _ignore(tags: list[int]) -> None:
    pass


class Spool:
    """Encoded NDJSON lines (no newline) waiting or in flight; see the module doc."""

    def __init__(self, max_events: int, max_bytes: int, release: Release = _ignore) -> None:
        if max_events < 1 or max_bytes < 1:
            raise ValueError(f"spool bounds must be ≥ 1: {max_events} events, {max_bytes} bytes")
        self.max_events, self.max_bytes = max_events, max_bytes
        self.release = release
        self._waiting: deque[tuple[bytes, int]] = deque()
        self.waiting_bytes = 0
        self.inflight: list[bytes] = []
        self._inflight_tags: list[int] = []
        self.inflight_bytes = 0

    def __len__(self) -> int:
        return len(self._waiting) + len(self.inflight)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def size_bytes(self) -> int:
        return self.waiting_bytes + self.inflight_bytes

    def add(self, line: bytes) -> int:
        """Append one line (untagged); returns how many events were dropped to make room (the
        oldest waiting ones, or this one when even an empty waiting queue leaves no room for it)."""
        dropped, fits = self.make_room(len(line))
        if fits:
            self.push(line)
        return dropped if fits else dropped + 1

    def make_room(self, size: int) -> tuple[int, bool]:
        """Drop the oldest waiting lines until ``size`` more bytes fit: (how many went, whether it
        fits now). The caller then ``push``es the line, or drops it."""
        gone: list[int] = []
        while self._waiting and not self._room_for(size):
            line, tag = self._waiting.popleft()
            self.waiting_bytes -= len(line)
            gone.append(tag)
        if gone:
            self.release(gone)
        return len(gone), self._room_for(size)

    def push(self, line: bytes, tag: int = -1) -> None:
        self._waiting.append((line, tag))
        self.waiting_bytes += len(line)

    def _room_for(self, size: int) -> bool:
        return len(self) < self.max_events and self.size_bytes + size <= self.max_bytes

    def take(self, max_events: int, max_bytes: int) -> list[bytes]:
        """Move the oldest waiting lines (at least one, at most ``max_events`` and, past the first,
        ``max_bytes`` joined) into flight; the in-flight batch must be empty."""
        assert not self.inflight, "one batch in flight at a time"
        size = 0
        while self._waiting and len(self.inflight) < max_events:
            line, tag = self._waiting[0]
            if self.inflight and size + len(line) + 1 > max_bytes:
                break
            self._waiting.popleft()
            self.inflight.append(line)
            self._inflight_tags.append(tag)
            size += len(line) + 1
        self.waiting_bytes -= size - len(self.inflight)
        self.inflight_bytes = size - len(self.inflight)
        return self.inflight

    def done(self) -> int:
        """The in-flight batch was answered for good (stored, or refused for good); its size."""
        n, tags = len(self.inflight), self._inflight_tags
        self.inflight, self._inflight_tags, self.inflight_bytes = [], [], 0
        if tags:
            self.release(tags)
        return n

    def split_inflight(self) -> bool:
        """The server found the batch too large: keep its first half in flight, put the rest back
        in front of the waiting queue. False when it is a single event (it cannot be split)."""
        if len(self.inflight) < 2:
            return False
        half = len(self.inflight) // 2
        back = list(zip(self.inflight[half:], self._inflight_tags[half:], strict=True))
        self.inflight, self._inflight_tags = self.inflight[:half], self._inflight_tags[:half]
        moved = sum(len(line) for line, _ in back)
        self.inflight_bytes -= moved
        self.waiting_bytes += moved
        self._waiting.extendleft(reversed(back))
        return True

    def clear(self, release: bool = True) -> int:
        """Drop everything waiting (not what is in flight); how many events that was. ``release``
        false: their journal lines stay, for the next poster (close with events unsent)."""
        tags = [tag for _, tag in self._waiting]
        self._waiting.clear()
        self.waiting_bytes = 0
        if release and tags:
            self.release(tags)
        return len(tags)
