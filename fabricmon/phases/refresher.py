"""Keeps the phase views of the runs someone is looking at computed off the request.

A live run's views change with every counter frame (1 s), and recomputing them costs 0.1–0.3 s
of CPU at 256 GPUs — 1.5–2.8 s of wall time on a box the product itself keeps busy (the hour
soak's ``views.json`` p95). Django runs every sync view of a web process on one thread, so such a
request also held up every page behind it. Here one daemon thread per web process recomputes each
*watched* run (asked for by ``views.json`` or the heatmap's phase markers in the last
``WATCH_S``) once per ``FABRICMON_PHASES_TICK_S``; a request answers from that result when
nothing settled (rank map, state, world size, topology) has changed and the result is at most
``FABRICMON_PHASES_MAX_STALE_S`` old (``state.RunPhaseState.recent``) — only events and counter
frames that streamed in meanwhile may be missing from it, and the answer says when it was current.
A run whose settled data changed, or one nobody watched yet, is computed in the request::

    request ──watch──▶ watched {run, routing, window: last asked}
       │                        │ every tick (while asked within WATCH_S)
       ▼                        ▼
    recent result? ──yes──▶ answer       refresher thread ──▶ RunPhaseState.snapshot (under COMPUTE_LOCK)
       │ no
       ▼
    compute now (under COMPUTE_LOCK) ──▶ answer

Memory is the states' own bound (``state.MAX_RUNS``); the work is one recompute per watched run per
tick, and none for a run nobody asked about for ``WATCH_S``.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import DatabaseError, close_old_connections
from redis import RedisError

from fabricmon.core.phases.routing import Routing
from fabricmon.jobs.models import Run
from fabricmon.phases import state

log = logging.getLogger(__name__)
WATCH_S = 120.0  # a run is refreshed for this long after it was last asked for
Key = tuple[int, Routing, state.StepWindow | None]


class Refresher:
    """The watched runs of this process and the thread that keeps their views fresh."""

    def __init__(self) -> None:
        self._watched: dict[Key, float] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.refreshes = 0  # recomputes asked for (tests, diagnostics)
        self._failing = False  # an outage was said (once)

    def watch(self, run_id: int, routing: Routing = state.PXN,
              window: state.StepWindow | None = None) -> None:
        """Keep this run's views fresh for the next ``WATCH_S`` (starts the thread on first use).
        Nothing to do when requests never take a recent result (``FABRICMON_PHASES_MAX_STALE_S`` 0)."""
        if float(settings.FABRICMON_PHASES_MAX_STALE_S) <= 0:
            return
        with self._lock:
            self._watched[(run_id, routing, window)] = time.monotonic()
            if len(self._watched) > state.MAX_RUNS:  # no more than the states kept in memory
                del self._watched[min(self._watched, key=self._watched.__getitem__)]
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="phase-views-refresher", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        """Forget every watched run and end the thread (tests)."""
        with self._lock:
            self._watched.clear()
            thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(30)

    def watched(self) -> list[Key]:
        now = time.monotonic()
        with self._lock:
            for key in [k for k, at in self._watched.items() if now - at > WATCH_S]:
                del self._watched[key]
            return list(self._watched)

    def refresh_once(self) -> None:
        """Recompute every watched run whose data changed (an unchanged one costs its fingerprint)."""
        for run_id, routing, window in self.watched():
            try:
                run = Run.objects.filter(pk=run_id).first()
                if run is None:
                    with self._lock:
                        self._watched = {k: v for k, v in self._watched.items() if k[0] != run_id}
                    continue
                state.run_state(run, None, window).snapshot(run, routing)
                self.refreshes += 1
                if self._failing:
                    log.info("phase views are refreshed again")
                    self._failing = False
            except (RedisError, DatabaseError) as exc:  # an outage: said once, the next tick tries again
                if not self._failing:
                    log.warning("phase views of run %s could not be refreshed (%s); trying every tick",
                                run_id, exc)
                self._failing = True
                continue
            except Exception:  # a bug: its traceback, and the other runs still refreshed
                log.exception("phase views of run %s could not be refreshed", run_id)
            finally:
                close_old_connections()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.refresh_once()
            if not self.watched():
                with self._lock:  # nothing to keep fresh: the thread ends, the next watch starts one
                    if not self._watched:
                        self._thread = None
                        return
            # a tick between starts, but never less than half a tick of rest: on a busy box the
            # recompute itself can take a tick, and the requests it serves need the CPU too
            tick = float(settings.FABRICMON_PHASES_TICK_S)
            self._stop.wait(max(tick / 2, tick - (time.monotonic() - started)))


REFRESHER = Refresher()


def recent_or_now(run: Run, routing: Routing = state.PXN,
                  window: state.StepWindow | None = None) -> tuple[state.PhaseSnapshot, int | None]:
    """The run's views for a request and when they were last known current (wall clock ns):
    watched from now on, answered from a recent result when one is fresh enough, else computed now."""
    REFRESHER.watch(run.pk, routing, window)
    st = state.run_state(run, None, window)
    snap = st.snapshot(run, routing, max_stale_s=float(settings.FABRICMON_PHASES_MAX_STALE_S))
    return snap, st.current_at_ns(routing)
