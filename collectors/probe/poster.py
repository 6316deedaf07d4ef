"""The probe's background poster: events from the training loop to the ingest API, nothing lost to
an outage shorter than the spool.

::

    submit(event) ──encode──▶ Spool (bounded: events, bytes) ──thread──▶ POST …/runs/<id>/events
       O(1), never blocks,         full → oldest waiting dropped,          ok → next batch
       never raises                counted (stats.dropped)                 down / 5xx / 429 → the same
                                                                           batch again after a backoff
                                                                           (retry.Backoff, Retry-After)

* **Idempotent retries.** Every event carries its id (``A2AProbe``: session-rank-group-seq) and the
  server claims ids per run (``jobs.ingest``: ``EventIdSet``), so a batch posted
  again after a lost answer is stored once: the server counts the repeats as ``duplicates``.
* **Dropped events are reported.** Once anything was dropped, every batch carries
  ``X-Probe-Session`` (this poster) and ``X-Probe-Dropped`` (its running total: a counter, as
  Prometheus sends them, so a lost or repeated batch cannot skew it); the server keeps the largest
  total per session and the run page shows the sum.
* **A refusal is final.** 401/403/404 (token invalid or revoked, the run another user's, no such
  run) disables the poster with ONE error log line and ``stats.error``; later events are dropped
  and counted without a word. Other 4xx drop that batch (counted): posting it again cannot help.
* **close() keeps its deadline.** It posts what it can until ``timeout_s``, then returns with
  ``stats.unsent`` (events not confirmed stored); a request still hanging at the deadline is
  abandoned to the daemon thread.

Bounds come from the arguments, else ``FABRICMON_PROBE_SPOOL_EVENTS`` / ``FABRICMON_PROBE_SPOOL_BYTES``
in the training process's environment. The spool is in memory; with ``spool_dir`` (one directory
per poster, e.g. per rank) every kept event is also journalled to local NDJSON files and a poster
started later on the same directory posts what an earlier one left (``journal.py``: its fsync
policy and bounds).
"""

from __future__ import annotations

import http.client
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec

from collectors.probe.client import IngestClient, clock_exchange
from collectors.probe.journal import Journal
from collectors.probe.peers import LIST_KEYS, as_maps, has_lists
from collectors.probe.retry import Backoff, refusal, retry_after_s, retryable
from collectors.probe.spool import Spool

log = logging.getLogger("collectors.probe.client")  # the name users already configure
_ENCODE = msgspec.json.Encoder().encode

DEFAULT_SPOOL_EVENTS = 100_000
DEFAULT_SPOOL_BYTES = 64 << 20  # a 2-minute outage of a 4-peer probe: 0.3 MB (bench/probe_outage.py)
MAX_BATCH_BYTES = 4 << 20  # well under the server's FABRICMON_INGEST_MAX_BYTES (32 MiB)
FSYNC_EVERY_S = 1.0  # the journal's fsync policy (journal.py)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name} must be a positive integer, got {raw!r}")
    return int(raw)


@dataclass
class PosterStats:
    """What the poster did. Events lost on this side: ``dropped`` (spool full, a batch refused for
    good, submitted after close or a refusal) + ``unsent`` (still spooled at close's deadline)."""

    queued: int = 0  # events taken into the spool
    posted: int = 0  # events the server accepted (stored + duplicates)
    stored: int = 0
    duplicates: int = 0  # already stored: a batch posted again after its answer was lost
    rejected: int = 0  # lines the server rejected (listed in its answer; the server knows them)
    dropped: int = 0
    unsent: int = 0
    replayed: int = 0  # events an earlier poster left in spool_dir, taken into this one's spool
    failed_posts: int = 0  # attempts that failed (unreachable, timeout, 5xx) and were retried
    rate_limited: int = 0  # 429 answers: the batch waited Retry-After and was posted again
    error: str = ""  # the server refused this probe (401/403/404): posting is disabled

    @property
    def lost(self) -> int:
        return self.dropped + self.unsent


class EventPoster:
    """Posts event dicts as NDJSON batches from a daemon thread; bounded, never blocking."""

    def __init__(
        self,
        client: IngestClient,
        run_id: int,
        *,
        batch_size: int = 1_000,
        max_buffer: int | None = None,
        max_buffer_bytes: int | None = None,
        max_batch_bytes: int = MAX_BATCH_BYTES,
        flush_interval_s: float = 1.0,
        clock_resync_s: float = 60.0,
        measure_clock: bool = True,
        min_backoff_s: float = 0.1,
        max_backoff_s: float = 5.0,
        max_retry_after_s: float = 60.0,
        spool_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.client, self.run_id = client, run_id
        self.batch_size, self.max_batch_bytes = batch_size, max_batch_bytes
        self.flush_interval_s, self.clock_resync_s = flush_interval_s, clock_resync_s
        self.max_retry_after_s = max_retry_after_s
        self.session = uuid.uuid4().hex[:16]
        self.stats = PosterStats()
        self.clock_offset_ns = 0
        self.clock_rtt_ns: int | None = None
        self._measure_clock = measure_clock
        # the optional event fields the server reads (its clock answer; None until it answered):
        # until it lists the per-pg-rank lists, they are posted as the maps every server reads
        self.server_fields: frozenset[str] | None = None
        self._fields_at: float | None = None
        self._clock_at: float | None = None
        self._clock_failing = False
        if max_buffer is None:
            max_buffer = _env_int("FABRICMON_PROBE_SPOOL_EVENTS", DEFAULT_SPOOL_EVENTS)
        if max_buffer_bytes is None:
            max_buffer_bytes = _env_int("FABRICMON_PROBE_SPOOL_BYTES", DEFAULT_SPOOL_BYTES)
        # ValueError at once (not in the thread) when the directory is another poster's
        self._journal = Journal(spool_dir) if spool_dir is not None else None
        self._spool = Spool(max_buffer, max_buffer_bytes)
        if self._journal is not None:
            self._spool.release = self._journal.release
        self._synced_at = time.monotonic()
        self._replay()
        self._backoff = Backoff(base_s=min_backoff_s, cap_s=max_backoff_s)
        self._down_since: float | None = None  # first failure of the current outage (for the log)
        self._cond = threading.Condition()
        self._closing = False  # close() called: no new events, post until the deadline
        self._stopped = False  # the thread must end (deadline passed, or the server refused us)
        self._deadline: float | None = None
        self._thread = threading.Thread(target=self._run, name="fabricmon-probe-poster", daemon=True)
        self._thread.start()

    @property
    def server_reads_lists(self) -> bool:
        """Whether events' per-pg-rank lists are posted as they are (``peers``)."""
        return self.server_fields is not None and self.server_fields >= LIST_KEYS

    @property
    def max_buffer(self) -> int:
        return self._spool.max_events

    @property
    def error(self) -> str:
        return self.stats.error

    @property
    def spooled(self) -> tuple[int, int]:
        """(events, bytes) in the spool now, waiting or in flight."""
        with self._cond:
            return len(self._spool), self._spool.size_bytes

    def _replay(self) -> None:
        """What an earlier poster left in ``spool_dir``, oldest first, ahead of anything new."""
        if self._journal is None:
            return
        for line, seg in self._journal.replayed:
            dropped, fits = self._spool.make_room(len(line))
            self.stats.dropped += dropped
            if fits:
                self._spool.push(line, seg)
                self.stats.replayed += 1
            else:
                self._journal.release([seg])
                self.stats.dropped += 1
        if self._journal.replayed:
            log.warning("probe: posting %d events an earlier poster left in %s", self.stats.replayed,
                        self._journal.dir)  # fmt: skip
        self._journal.replayed = []

    # --- the training side ------------------------------------------------------------------------
    def submit(self, event: dict[str, Any]) -> None:
        """Queue one event; never blocks on the network, never raises."""
        try:
            if not self.server_reads_lists and has_lists(event):
                event = as_maps(event)
            line = _ENCODE(event)  # now: the bound is in bytes, and later changes to the dict don't leak in
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
            with self._cond:
                self.stats.dropped += 1
            return
        with self._cond:
            if self._closing or self._stopped:
                self.stats.dropped += 1
                return
            dropped, fits = self._spool.make_room(len(line))
            self.stats.dropped += dropped + (not fits)
            if not fits:
                return
            self._spool.push(line, self._journal_append(line))
            self.stats.queued += 1
            if self._spool.waiting >= self.batch_size:
                self._cond.notify()

    __call__ = submit

    def _journal_append(self, line: bytes) -> int:
        if self._journal is None:
            return -1
        try:
            return self._journal.append(line)
        except OSError as exc:  # disk full, directory gone: keep posting from memory
            log.error("probe: spool directory %s failed (%s); spooling in memory only",
                      self._journal.dir, exc)  # fmt: skip
            self._journal = None
            return -1

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything spooled has been answered (or dropped); True if it got there."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._cond.notify_all()
            while len(self._spool) and not self._stopped:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
                self._cond.notify_all()
        return not len(self._spool)

    def close(self, timeout_s: float = 10.0) -> PosterStats:
        """Post what is spooled until ``timeout_s`` has passed, then stop; returns the stats, with
        ``unsent`` = events not confirmed stored by then. Returns within ``timeout_s`` whatever the
        server does (a request still hanging then is left to the daemon thread)."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        with self._cond:
            if self._stopped and self._closing:  # closed before: its report stands
                return self.stats
            if self._deadline is None or deadline < self._deadline:
                self._deadline = deadline
            self._closing = True
            self._cond.notify_all()
            while len(self._spool) and not self._stopped:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            self._stopped = True
            self.stats.unsent += len(self._spool)
            if self.stats.unsent:
                log.warning(
                    "probe: closed with %d events not confirmed stored (run %s, server %s)",
                    self.stats.unsent, self.run_id, self.client.base_url,
                )
            self._spool.clear(release=False)  # (their journal lines stay for the next poster)
            if self._journal is not None:
                try:
                    kept = self._journal.close()
                except OSError as exc:
                    log.error("probe: closing spool directory %s failed: %s", self._journal.dir, exc)
                    kept = 0
                if kept:
                    log.warning("probe: %d events kept in %s for the next poster", kept, self._journal.dir)
            self._cond.notify_all()
        self._thread.join(max(deadline - time.monotonic(), 0.0))
        return self.stats

    # --- the posting thread -----------------------------------------------------------------------
    def _run(self) -> None:
        self._sync_clock()  # first: the offset, and whether the server reads per-pg-rank lists
        while True:
            with self._cond:
                if not self._spool.inflight and self._spool.waiting < self.batch_size and not self._closing:
                    self._cond.wait(self.flush_interval_s)
                if self._stopped:
                    return
                if not self._spool.inflight:
                    if not self._spool.waiting:
                        if self._closing:  # close() ends us once it sees the spool empty
                            self._cond.wait(self.flush_interval_s)
                        continue
                    self._spool.take(self.batch_size, self.max_batch_bytes)
                body = b"\n".join(self._spool.inflight)
                headers = self._dropped_headers()
                timeout_s = self._request_timeout_s()
            self._sync_clock()
            self._sync_journal()
            delay = self._post(body, headers, timeout_s)
            self._pause(delay)

    def _pause(self, delay_s: float) -> None:
        """Wait before the next attempt (close's deadline ends it), keeping the journal's fsync
        policy meanwhile."""
        end = time.monotonic() + delay_s
        while (left := end - time.monotonic()) > 0:
            with self._cond:
                if self._cond.wait_for(lambda: self._stopped, timeout=min(left, FSYNC_EVERY_S)):
                    return
            self._sync_journal()

    def _sync_journal(self) -> None:
        """fsync the journal at most every FSYNC_EVERY_S, outside the lock (submit never waits)."""
        if self._journal is None or time.monotonic() - self._synced_at < FSYNC_EVERY_S:
            return
        self._synced_at = time.monotonic()
        with self._cond:
            fd = self._journal.sync_fd() if self._journal is not None and not self._journal.closed else None
        if fd is not None:
            try:
                os.fsync(fd)
            except OSError as exc:  # the thread must live on: the lines are still in the OS's cache
                log.warning("probe: fsync of the spool journal failed: %s", exc)
            finally:
                os.close(fd)

    def _dropped_headers(self) -> dict[str, str]:
        if not self.stats.dropped:
            return {}
        return {"X-Probe-Session": self.session, "X-Probe-Dropped": str(self.stats.dropped)}

    def _request_timeout_s(self) -> float:
        """The client's timeout, cut to what is left of close's deadline."""
        if self._deadline is None:
            return self.client.timeout_s
        return max(min(self.client.timeout_s, self._deadline - time.monotonic()), 0.05)

    def _sync_clock(self) -> None:
        now = time.monotonic()
        if not self._measure_clock:
            self._learn_fields(now)
        if (
            not self._measure_clock
            or self._closing
            or (self._clock_at is not None and now - self._clock_at < self.clock_resync_s)
        ):
            return
        self._clock_at = now
        try:
            self.clock_offset_ns, self.clock_rtt_ns, fields = clock_exchange(
                self.client.base_url, timeout_s=min(2.0, self.client.timeout_s)
            )
            self.server_fields = fields
            self._clock_failing = False
        except (OSError, ValueError, KeyError, http.client.HTTPException) as exc:
            # keep the last offset; try again in a few seconds, not a minute (a first exchange
            # during an outage would leave the offset at 0 for the whole interval)
            self._clock_at = now - self.clock_resync_s + min(5.0, self.clock_resync_s)
            if not self._clock_failing:
                log.warning("probe: clock offset exchange failed (kept %d ns): %s", self.clock_offset_ns, exc)
            self._clock_failing = True

    def _learn_fields(self, now: float) -> None:
        """Without clock exchanges: ask the server once a minute, until it answers, which event
        fields it reads (one sample of the same request)."""
        if self._closing or (self._fields_at is not None and now - self._fields_at < self.clock_resync_s):
            return
        self._fields_at = now
        try:
            timeout_s = min(2.0, self.client.timeout_s)
            _, _, fields = clock_exchange(self.client.base_url, samples=1, timeout_s=timeout_s)
        except (OSError, ValueError, KeyError, http.client.HTTPException):
            return
        self.server_fields = fields
        self._fields_at = float("inf")  # (known: not asked again)

    def _post(self, body: bytes, headers: dict[str, str], timeout_s: float) -> float:
        """One attempt at the in-flight batch; the delay before the next attempt (0: go on)."""
        try:
            answer = self.client.send_events(
                self.run_id, body, self.clock_offset_ns, headers, timeout_s=timeout_s
            )
        except (OSError, http.client.HTTPException, ValueError) as exc:  # refused, reset, timed out, garbled
            return self._failed(f"server unreachable: {exc}")
        status, result = answer.status, answer.body
        if refusal(status):
            self._disable(status, result)
            return 0.0
        if status == 429:
            self.stats.rate_limited += 1
            wait = retry_after_s(answer.headers, result)
            log.warning("probe: rate limited by the server, posting again in %.1f s", wait or 0.0)
            return min(wait, self.max_retry_after_s) if wait is not None else self._backoff.next_delay_s()
        if retryable(status) or (status < 300 and not _is_result(result)):
            wait = retry_after_s(answer.headers, result)
            delay = self._failed(f"server answered {status}: {_brief(result)}")
            return min(wait, self.max_retry_after_s) if wait is not None else delay
        if status == 413:
            with self._cond:
                if self._spool.split_inflight():
                    self.max_batch_bytes = max(len(body) // 2, 1)
                    return 0.0
        if not _is_result(result):  # 400/413/…: this batch will never be taken
            with self._cond:
                n = self._spool.done()
                self.stats.dropped += n
                self._cond.notify_all()
            log.warning("probe: server refused a batch (%s), dropped %d events: %s", status, n,
                        _brief(result))
            return 0.0
        self._answered(result)
        return 0.0

    def _failed(self, reason: str) -> float:
        self.stats.failed_posts += 1
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning(
                "probe: %s; keeping %d events (spool bound %d events / %d bytes), retrying with backoff",
                reason, len(self._spool), self._spool.max_events, self._spool.max_bytes,
            )
        return self._backoff.next_delay_s()

    def _answered(self, result: dict[str, Any]) -> None:
        with self._cond:
            self._spool.done()
            self.stats.posted += int(result.get("accepted", 0))
            self.stats.stored += int(result.get("stored", 0))
            self.stats.duplicates += int(result.get("duplicates", 0))
            self.stats.rejected += int(result.get("rejected_count", 0))
            self._cond.notify_all()
        self._backoff.reset()
        if self._down_since is not None:
            log.warning(
                "probe: server back after %.1f s (%d failed attempts so far)",
                time.monotonic() - self._down_since, self.stats.failed_posts,
            )
            self._down_since = None
        if result.get("rejected"):
            log.warning(
                "probe: %s events rejected, first: %s", result.get("rejected_count"), result["rejected"][0]
            )

    def _disable(self, status: int, result: Any) -> None:
        reason = result.get("error") if isinstance(result, dict) else None
        with self._cond:
            self.stats.error = f"{status} {reason or _brief(result)}"
            self.stats.dropped += self._spool.done() + self._spool.clear()
            self._stopped = True
            self._cond.notify_all()
        log.error(
            "probe: the server refused this probe for run %s (%s); posting disabled, events from now "
            "on are dropped and counted (check the token and the run id)",
            self.run_id, self.stats.error,
        )


def _is_result(body: Any) -> bool:
    return isinstance(body, dict) and "accepted" in body


def _brief(body: Any) -> str:
    text = str(body)
    return text if len(text) <= 200 else text[:200] + "…"
