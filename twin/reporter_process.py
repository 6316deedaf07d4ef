"""The twin's job reporter in a process of its own, so the twin's agents never queue behind it.

A real job posts its events from the training processes, not from the switches. The twin hosts
both, and in one interpreter the reporter's bursts (a whole MoE step of 256-peer maps turned into
events and JSON) held the GIL long enough that the SNMP and gNMI agents stopped answering for
5–25 s every report (found by the soak: frames without data, py-spy on the twin). Here the twin
only hands each reported phase's matrix to a queue; a spawned child runs the same
:class:`~twin.live_reporter.LiveJobReporter` and writes its ``status()`` to shared memory::

    Twin loop ── on_phase (filtered by step, O(1)) ──▶ mp.Queue (bounded; full → dropped, counted)
                                                        ▼ child process
                                  LiveJobReporter.on_phase ─▶ events ─▶ POST …/events
    Twin.status()["report"] ◀── JSON in a shared buffer, rewritten every 0.25 s by the child
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import queue
import time
from typing import Any, NamedTuple

import numpy as np

from twin.job_reporter import rank_hosts
from twin.live_reporter import LiveJobReporter, pending_phases, reported_step
from twin.schedule import Phase

log = logging.getLogger(__name__)
STATUS_BYTES = 1 << 16
STATUS_EVERY_S = 0.25


class _PhaseRow(NamedTuple):
    """The fields of a Phase the reporter reads (the per-port arrays stay in the twin)."""

    step: int
    layer: int
    kind: str
    start_ns: int
    end_ns: int


class ReporterProcess:
    """Same constructor, ``on_phase``, ``start``, ``stop`` and ``status`` as LiveJobReporter."""

    def __init__(self, fabric: Any, base_url: str, token: str, **kwargs: Any) -> None:
        self.every_steps = int(kwargs.get("every_steps", 1))
        self.block_steps = int(kwargs.get("block_steps", 1))
        if self.every_steps < 1 or self.block_steps < 1:
            raise ValueError(f"report every_steps and block_steps must be ≥ 1: "
                             f"{self.every_steps}, {self.block_steps}")
        ctx = mp.get_context("spawn")  # the twin has threads running: never fork it
        world = len(rank_hosts(fabric))
        self.world_size = world
        # bounded in bytes of blocks (a 5,632-GPU job's phase is 11.5 MB): the twin never holds
        # more than a few phases the child has not taken yet
        self._queue: Any = ctx.Queue(maxsize=pending_phases(world, int(kwargs.get("group_gpus") or world)))
        self._status: Any = ctx.Array("c", STATUS_BYTES)
        self._retry: Any = ctx.Value("d", float(kwargs.get("retry_s", 1.0)))
        self._stop: Any = ctx.Event()
        self._proc = ctx.Process(
            target=_child, name="twin-job-reporter", daemon=True,
            args=((fabric, base_url, token), kwargs,
                  _Shared(self._queue, self._status, self._retry, self._stop)),
        )
        self.dropped = 0  # phases the queue had no room for

    @property
    def retry_s(self) -> float:
        return float(self._retry.value)

    @retry_s.setter
    def retry_s(self, value: float) -> None:  # tests shorten the child's connect retry
        self._retry.value = float(value)

    def wants(self, step: int) -> bool:
        """Whether ``step``'s phases are reported (the timeline builds their blocks)."""
        return reported_step(step, self.every_steps, self.block_steps)

    def on_phase(self, ph: Phase, blocks: np.ndarray) -> None:
        if not self.wants(ph.step):  # before the blocks are copied
            return
        try:
            self._queue.put_nowait((ph.step, ph.layer, ph.kind, ph.start_ns, ph.end_ns,
                                    np.ascontiguousarray(blocks)))
        except queue.Full:
            self.dropped += 1

    def start(self) -> ReporterProcess:
        self._proc.start()
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        self._stop.set()
        self._proc.join(timeout_s)
        if self._proc.is_alive():
            log.warning("twin job reporter: did not end within %.0f s; terminated", timeout_s)
            self._proc.terminate()
            self._proc.join(2.0)
        self._queue.cancel_join_thread()  # what is left unposted is gone with the twin

    def status(self) -> dict[str, Any]:
        raw = bytes(self._status.value)
        st: dict[str, Any] = json.loads(raw) if raw else {"state": "starting", "error": "",
                                                          "phases_dropped": 0, "events_dropped": 0}
        if self.dropped:
            st["phases_dropped"] = st.get("phases_dropped", 0) + self.dropped
            st["events_dropped"] = st.get("events_dropped", 0) + self.dropped * self.world_size
        return st


class _Shared(NamedTuple):
    """What the twin and the child share (passed at spawn, so they are inherited, not pickled)."""

    queue: Any
    status: Any
    retry: Any
    stop: Any


def _child(args: tuple[Any, str, str], kwargs: dict[str, Any], shared: _Shared) -> None:
    q, status, retry, stop = shared
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    reporter = LiveJobReporter(*args, **kwargs).start()
    last = 0.0
    try:
        while True:
            reporter.retry_s = float(retry.value)
            try:
                item = q.get(timeout=0.1)
            except queue.Empty:
                item = None
            if item is not None:
                reporter.on_phase(_PhaseRow(*item[:5]), item[5])  # type: ignore[arg-type]
            elif stop.is_set():
                break
            if time.monotonic() - last >= STATUS_EVERY_S:
                _write_status(status, reporter)
                last = time.monotonic()
    finally:
        reporter.stop()
        _write_status(status, reporter)


def _write_status(status: Any, reporter: LiveJobReporter) -> None:
    data = json.dumps(reporter.status()).encode()[: STATUS_BYTES - 1]
    with status.get_lock():
        status.value = data
