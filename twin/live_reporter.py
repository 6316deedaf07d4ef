"""The running twin's MoE job reporting itself live, like a real job with the probe:

::

    JobTimeline._place ──on_phase(phase, blocks)──▶ pending (bounded in bytes; full → dropped, counted)
                                                       │ reporter thread, every 100 ms:
                                                       │ phases whose end_ns ≤ now (real time)
                                                       ▼
        collectors.probe.events_from_matrix, one EP group at a time (its members' global ranks)
                                                       ──▶ EventPoster ──▶ POST /jobs/api/runs/<id>/events

A phase's traffic is its (groups, G, G) EP-group blocks (twin/moe.py); each rank's event carries
its group's G peers (``pg_ranks`` = the group's global ranks), never the whole job's N.

Before the first phase it creates a run (``POST /jobs/api/runs``, tags twin, moe, routing=…, ep=G),
uploads the rank map (rank → host, GPU, NIC → leaf port, from the twin's fabric) and lets the
poster measure the clock offset. Run creation retries until the API answers (bounded by
``connect_timeout_s``, logged) so a twin may start before the web server. Nothing here blocks or
raises into the twin: a full queue, a down server or a refused batch drops events and counts them
(``status()``, shown under ``report`` in the twin's /status). ``stop()`` ends the run.

``skew_ns`` shifts every event's times — a host clock that was wrong when the events were
stamped, which the probe's offset exchange cannot see (the phases gates must catch it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

import numpy as np

from collectors.probe import EventPoster, IngestClient, events_from_matrix
from fabricmon.core.topology.spec import FabricSpec
from twin.job_reporter import rank_hosts, rank_map_entries
from twin.schedule import Phase

log = logging.getLogger(__name__)

# Pending blocks are kept until their phase ends (the timeline places phases up to one step
# ahead of the clock). Bound them in bytes so a 256-GPU fabric (512 KiB a phase) stays small and a
# 5,632-GPU one (22 groups of 256: 11.5 MB a phase) holds a few phases, not a step's 16.
PENDING_BYTES = 64 << 20


def pending_phases(world_size: int, group_gpus: int) -> int:
    """How many phases' blocks fit PENDING_BYTES (at least 2: one being posted, one waiting)."""
    return max(2, PENDING_BYTES // max(1, 8 * world_size * group_gpus))


def as_blocks(traffic: np.ndarray) -> np.ndarray:
    """A phase's traffic as (groups, G, G) blocks (an (N, N) matrix is one group)."""
    return traffic[None] if traffic.ndim == 2 else traffic


def reported_step(step: int, every_steps: int, block_steps: int) -> bool:
    """Whether ``step`` is reported: ``block_steps`` consecutive steps of every
    ``every_steps × block_steps``."""
    return not (step // block_steps) % every_steps


def _read_token(path: str) -> str:
    """The token file's content; OSError while it does not exist yet or is still empty."""
    with open(path) as f:
        token = f.read().strip()
    if not token:
        raise OSError(f"token file {path} is empty")
    return token


class LiveJobReporter:
    """Posts the twin's completed phases through the probe client path; see the module doc."""

    def __init__(
        self,
        fabric: FabricSpec,
        base_url: str,
        token: str,
        *,
        token_file: str | None = None,
        run_name: str,
        tags: list[str],
        skew_ns: int = 0,
        every_steps: int = 1,
        block_steps: int = 1,
        connect_timeout_s: float = 120.0,
        retry_s: float = 1.0,
        max_buffer_events: int = 20_000,
        group_gpus: int | None = None,
    ) -> None:
        if every_steps < 1 or block_steps < 1:
            raise ValueError(f"report every_steps and block_steps must be ≥ 1: {every_steps}, {block_steps}")
        self.fabric = fabric
        self.client = IngestClient(base_url, token, timeout_s=5.0)
        self.token_file = token_file  # read when connecting if ``token`` is empty
        self.run_name, self.tags = run_name, tags
        # report block_steps consecutive steps of every every_steps * block_steps: the same share of
        # the job as every k-th step, but with poll intervals that hold only reported steps, so the
        # server can check the projection against the counters (core.phases.gates.step_coverage)
        self.skew_ns, self.every_steps, self.block_steps = int(skew_ns), every_steps, block_steps
        self.connect_timeout_s, self.retry_s = connect_timeout_s, retry_s
        self.max_buffer_events = max_buffer_events
        self.hosts = rank_hosts(fabric)
        self.world_size = len(self.hosts)
        self.group_gpus = group_gpus or self.world_size  # peers of one event
        self.max_pending = pending_phases(self.world_size, self.group_gpus)
        # an event carries 2G per-peer counts (~7 bytes each as per-pg-rank lists, ~12 as the
        # maps an older server is sent): keep a batch near 2 MB
        self.batch_events = max(16, min(2_000, 2_000_000 // (14 * self.group_gpus)))
        self.run_id: int | None = None
        self.state = "starting"  # starting → connecting → reporting → ended | failed
        self.error = ""
        self.poster: EventPoster | None = None
        self.phases_seen = 0
        self.phases_reported = 0
        self.phases_dropped = 0  # queue full, or no run (server never answered)
        self.events_dropped_no_run = 0
        self._pending: deque[tuple[int, int, str, int, int, np.ndarray]] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="twin-job-reporter", daemon=True)

    # -- the timeline's hook (twin loop thread): O(1), never blocks -----------------------------
    def on_phase(self, ph: Phase, blocks: np.ndarray) -> None:
        if not reported_step(ph.step, self.every_steps, self.block_steps):
            return
        with self._lock:
            self.phases_seen += 1
            if len(self._pending) >= self.max_pending or self.state in ("failed", "ended"):
                self.phases_dropped += 1
                return
            self._pending.append((ph.step, ph.layer, ph.kind, ph.start_ns, ph.end_ns, as_blocks(blocks)))

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> LiveJobReporter:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def status(self) -> dict[str, Any]:
        st = self.poster.stats if self.poster is not None else None
        return {
            "url": self.client.base_url, "run_id": self.run_id, "state": self.state, "error": self.error,
            "every_steps": self.every_steps, "block_steps": self.block_steps, "skew_ns": self.skew_ns,
            "phases_seen": self.phases_seen, "phases_reported": self.phases_reported,
            "phases_dropped": self.phases_dropped, "pending_phases": len(self._pending),
            "events_queued": st.queued if st else 0, "events_posted": st.posted if st else 0,
            "events_rejected": st.rejected if st else 0,
            "events_dropped": (st.dropped if st else 0) + self.events_dropped_no_run,
            "events_unsent": st.unsent if st else 0,  # still spooled when stop()'s deadline passed
            "failed_posts": st.failed_posts if st else 0,
            "clock_offset_ns": self.poster.clock_offset_ns if self.poster else None,
        }

    # -- reporter thread -----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            if self._connect():
                self._report_loop()
        except Exception as exc:  # never take the twin down; say why reporting stopped
            log.exception("twin job reporter crashed")
            self.state, self.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            self._finish()

    def _connect(self) -> bool:
        self.state = "connecting"
        deadline = time.monotonic() + self.connect_timeout_s
        attempt = 0
        while not self._stop.is_set():
            attempt += 1
            try:
                if not self.client.token and self.token_file:
                    self.client.token = _read_token(self.token_file)
                self.run_id = self.client.create_run(self.run_name, self.tags, fabric=self.fabric.name,
                                                     world_size=self.world_size)
                break
            except (OSError, RuntimeError, ValueError) as exc:
                self.error = f"create run (attempt {attempt}): {exc}"
                if time.monotonic() >= deadline or "401" in str(exc) or "403" in str(exc):
                    log.error("twin job reporter: giving up: %s", self.error)
                    self.state = "failed"
                    return False
                log.warning("twin job reporter: %s; retrying in %.1fs", self.error, self.retry_s)
                self._drop_pending()  # phases of this wait are not kept: memory stays bounded
                self._stop.wait(self.retry_s)
        if self.run_id is None:
            return False
        try:
            status, body = self.client.post_rank_map(self.run_id, rank_map_entries(self.fabric))
            if status >= 300:
                self.error = f"rank map rejected: {status} {body}"
                log.warning("twin job reporter: %s", self.error)
        except OSError as exc:
            self.error = f"rank map: {exc}"
            log.warning("twin job reporter: %s", self.error)
        self.poster = EventPoster(self.client, self.run_id, batch_size=self.batch_events,
                                  max_buffer=self.max_buffer_events, measure_clock=True)
        self.state = "reporting"
        log.info("twin job reporter: run %s on %s", self.run_id, self.client.base_url)
        return True

    def _drop_pending(self) -> None:
        with self._lock:
            n = len(self._pending)
            self._pending.clear()
            self.phases_dropped += n
            self.events_dropped_no_run += n * self.world_size

    def _report_loop(self) -> None:
        assert self.poster is not None
        while not self._stop.wait(0.1):
            self._post_completed(time.time_ns())
        self._post_completed(time.time_ns())

    def _post_completed(self, now_ns: int) -> None:
        assert self.poster is not None
        while True:
            with self._lock:
                if not self._pending or self._pending[0][4] > now_ns:
                    return
                step, layer, kind, start_ns, end_ns, blocks = self._pending.popleft()
            g = blocks.shape[1]
            for k, block in enumerate(blocks):
                for ev in events_from_matrix(block, step=step, layer=layer, phase=kind,
                                             start_ns=start_ns + self.skew_ns, end_ns=end_ns + self.skew_ns,
                                             id_prefix=f"twin{self.run_id}", hosts=self.hosts,
                                             ranks=range(k * g, (k + 1) * g)):
                    self.poster.submit(ev)
            self.phases_reported += 1

    def _finish(self) -> None:
        if self.state in ("failed",) and self.poster is None:
            self._drop_pending()
            return
        if self.poster is not None:
            self.poster.close(timeout_s=5.0)
        if self.run_id is not None:
            try:
                self.client.request("POST", f"/jobs/api/runs/{self.run_id}/end", b"{}")
            except OSError as exc:
                log.warning("twin job reporter: ending run %s failed: %s", self.run_id, exc)
        if self.state != "failed":
            self.state = "ended"
        with self._lock:  # what is left had not ended at stop: phases that never completed
            self._pending.clear()
