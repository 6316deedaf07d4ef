"""Faults the running twin can inject, applied on its own loop: an agent restart, an unreachable
switch, 64-bit counters about to wrap.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from twin.agent_state import TICKS_PER_S
from twin.counters import HC_METRICS

NS = 1_000_000_000


class TwinFaults:
    """Mixed into :class:`twin.cluster.Twin` (which owns the loop, the clock and the agents)."""

    def _on_loop(self, fn: Any) -> None:
        if self._loop is None:
            raise RuntimeError("twin is not running")
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()

        self._loop.call_soon_threadsafe(run)
        if not done.wait(10):
            raise RuntimeError("twin loop did not apply the fault within 10 s")

    def restart(self, switch: str) -> None:
        """Agent restart: sysUpTime and all the switch's counters start again from 0."""
        state, sl = self.agents[switch], self.ports.slice_of(switch)

        def apply() -> None:
            now = time.time_ns()
            self._tick(now, overrides=[((sl, slice(None)), 0)])
            state.boot_ns = now
            state.discontinuity_ticks = [0] * len(state.discontinuity_ticks)

        self._on_loop(apply)

    def set_unreachable(self, switch: str, on: bool = True) -> None:
        """The switch's agent stops answering (``on``) or answers again."""
        self.agents[switch].unreachable = on

    def wrap(self, switch: str, seconds_to_wrap: float = 2.0) -> None:
        """Move the switch's 64-bit counters to just below 2^64 so they wrap in ``seconds_to_wrap``
        (ports that will carry no traffic by then sit at 2^64 − 1).

        The jump itself is a discontinuity (ifCounterDiscontinuityTime is set to now); the wrap that
        follows is a natural one.
        """
        state, sl = self.agents[switch], self.ports.slice_of(switch)

        def apply() -> None:
            now = time.time_ns()
            # The job's schedule is known ahead: leave exactly the bytes (and packets) the port
            # will count in the next ``seconds_to_wrap``, so the wrap lands on time.
            in_b, out_b, _ = self.timeline.window_bytes(now, now + int(seconds_to_wrap * NS))
            pkt = self.cfg.packet_bytes
            ahead = np.stack([in_b, out_b, in_b / pkt, out_b / pkt], axis=1)
            headroom = np.ceil(np.maximum(ahead[sl], 1.0)).astype(np.uint64)
            with np.errstate(over="ignore"):
                near = np.uint64(0) - headroom  # 2^64 − headroom, in wrapping uint64
            self._tick(now, overrides=[((sl, HC_METRICS), near)])
            ticks = ((now - state.boot_ns) * TICKS_PER_S // NS) & 0xFFFFFFFF
            state.discontinuity_ticks = [int(ticks)] * len(state.discontinuity_ticks)

        self._on_loop(apply)
