"""Queue-driven counter sources for the twin's gNMI targets.

:class:`QueueCounterSource` runs :class:`twin.queue_model.QueueBank` (one egress queue per
port) over a schedule of constant-rate phases and serves every leaf of
:mod:`collectors.gnmi.paths` from it — octets and packets, ECN marks, drops, PFC frames and
duration, the read-and-clear watermark. It keeps each read it served, so tests can compare a
collector against exactly what the device said at those device timestamps (the ground truth).

The schedule is ``arrival_fn(phase_index) -> bytes/s per port`` on a fixed ``phase_s`` grid
starting at ``t0_ns``; the bank is advanced lazily, in whole phases plus a tail, up to each read.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from collectors.gnmi.paths import speed_identity
from twin.queue_model import QueueBank, QueueConfig

if TYPE_CHECKING:
    from twin.fabric_queues import FabricQueues

ArrivalFn = Callable[[int], npt.NDArray[np.float64]]
NS = 1_000_000_000


class QueueCounterSource:
    """One switch: ports, a queue per port, an arrival schedule; ``read()`` → gNMI leaves."""

    def __init__(
        self,
        port_names: Sequence[str],
        speed_bps: npt.ArrayLike,
        arrival_fn: ArrivalFn,
        *,
        phase_s: float = 0.005,
        cfg: QueueConfig | None = None,
        t0_ns: int | None = None,
        base: int = 0,
        history: int = 4096,
    ) -> None:
        self.port_names = tuple(port_names)
        self.speed_bps = np.asarray(speed_bps, dtype=np.float64)
        self.cfg = cfg or QueueConfig.for_ports(self.speed_bps)
        self.bank = QueueBank(self.cfg)
        self.arrival_fn = arrival_fn
        self.phase_ns = round(phase_s * NS)
        self.t0_ns = time.time_ns() if t0_ns is None else t0_ns
        self.base = base  # counter offset: a restarted device with "changed data" uses another
        self.oper_up = np.ones(len(self.port_names), dtype=bool)
        # (ts_ns, leaves, cleared): every read served, for ground truth
        self.history: deque[tuple[int, dict[str, npt.NDArray[Any]], bool]] = deque(maxlen=history)
        self._now_ns = self.t0_ns
        self._lock = threading.Lock()

    def _advance_to(self, t_ns: int) -> None:
        while self._now_ns < t_ns:
            k = (self._now_ns - self.t0_ns) // self.phase_ns
            end = min(t_ns, self.t0_ns + (k + 1) * self.phase_ns)
            self.bank.step(self.arrival_fn(int(k)), (end - self._now_ns) / NS)
            self._now_ns = end

    def read(self, t_ns: int | None = None, *, clear: bool = True) -> tuple[int, dict[str, npt.NDArray[Any]]]:
        with self._lock:
            t = time.time_ns() if t_ns is None else max(t_ns, self._now_ns)
            self._advance_to(t)
            snap = self._leaves(clear)
            self.history.append((t, snap, clear))
            return t, snap

    def _leaves(self, clear: bool) -> dict[str, npt.NDArray[Any]]:
        b, base = self.bank, np.uint64(self.base)
        pkts = b.packets

        def octets(x: npt.NDArray[np.float64]) -> npt.NDArray[np.uint64]:
            return np.floor(x).astype(np.uint64) + base

        pause_frames = np.floor(b.pause_frames).astype(np.uint64) + base
        pause_us = np.floor(b.pause_s * 1e6).astype(np.uint64) + base
        zero = np.zeros(len(self.port_names), dtype=np.uint64) + base
        dropped = pkts(b.dropped_bytes).astype(np.uint64) + base
        return {
            "in_octets": octets(b.admitted_bytes),
            "out_octets": octets(b.tx_bytes),
            "in_discards": zero,
            "out_discards": dropped,
            "in_errors": zero,
            "in_pause_frames": zero,
            "out_pause_frames": pause_frames,
            "q_tx_octets": octets(b.tx_bytes),
            "q_tx_pkts": pkts(b.tx_bytes).astype(np.uint64) + base,
            "q_dropped_pkts": dropped,
            "q_ecn_marked_pkts": pkts(b.ecn_marked_bytes).astype(np.uint64) + base,
            "q_max_len": np.floor(b.read_watermark() if clear else b.watermark_bytes).astype(np.uint64),
            "pfc_rx_frames": zero,
            "pfc_tx_frames": pause_frames,
            "pfc_rx_duration_us": zero,
            "pfc_tx_duration_us": pause_us,
            "oper_status": np.where(self.oper_up, "UP", "DOWN"),
            "port_speed": np.asarray([speed_identity(s) for s in self.speed_bps]),
        }

    def at(self, ts_ns: int) -> dict[str, npt.NDArray[Any]]:
        """The snapshot served at device time ``ts_ns`` (KeyError if it was never served)."""
        with self._lock:
            for t, snap, _ in reversed(self.history):
                if t == ts_ns:
                    return snap
        raise KeyError(ts_ns)

    def peak_between(self, t0_ns: int, t1_ns: int) -> npt.NDArray[np.uint64]:
        """Max watermark over the clearing reads served in (t0, t1]: what a collector must show."""
        with self._lock:
            rows = [s["q_max_len"] for t, s, cleared in self.history if cleared and t0_ns < t <= t1_ns]
        return np.max(rows, axis=0) if rows else np.zeros(len(self.port_names), dtype=np.uint64)


# ---- the twin's own switches ------------------------------------------------------------------
def queue_leaves(
    cum: dict[str, npt.NDArray[np.float64]], pkt_bytes: float
) -> dict[str, npt.NDArray[np.uint64]]:
    """Cumulative fluid counters (twin.fabric_queues.FabricQueues.counters_at) → the integer
    counter leaves a device serves. Both the gNMI target and the twin's truth go through here."""

    def floor(x: npt.NDArray[np.float64]) -> npt.NDArray[np.uint64]:
        return np.floor(x).astype(np.uint64)

    return {
        "in_pause_frames": floor(cum["pfc_rx_frames"]),
        "out_pause_frames": floor(cum["pfc_tx_frames"]),
        "q_tx_octets": floor(cum["tx_bytes"]),
        "q_tx_pkts": floor(cum["tx_bytes"] / pkt_bytes),
        "q_dropped_pkts": floor(cum["dropped_bytes"] / pkt_bytes),
        "q_ecn_marked_pkts": floor(cum["ecn_marked_bytes"] / pkt_bytes),
        "pfc_rx_frames": floor(cum["pfc_rx_frames"]),
        "pfc_tx_frames": floor(cum["pfc_tx_frames"]),
        "pfc_rx_duration_us": floor(cum["pfc_rx_s"] * 1e6),
        "pfc_tx_duration_us": floor(cum["pfc_tx_s"] * 1e6),
    }


class TwinSwitchSource:
    """One switch of a running twin as a gNMI counter source.

    Interface octets, discards and errors are the twin's own counters (the ones its SNMP agent
    serves, ``CounterClock``); queue, ECN, PFC and watermark leaves come from the fabric's queue
    model over the same timeline. The watermark is read-and-clear: each clearing read reports
    the max occupancy since the previous one (device semantics, shared by all readers).
    """

    def __init__(
        self,
        port_names: Sequence[str],
        speed_bps: npt.ArrayLike,
        ports: slice,
        *,
        read_counters: Callable[[int, slice], npt.NDArray[np.uint64]],
        queues: FabricQueues,
        t0_ns: int,
    ) -> None:
        self.port_names = tuple(port_names)
        self.speed_bps = np.asarray(speed_bps, dtype=np.float64)
        self.sl = ports
        self.read_counters = read_counters
        self.queues = queues
        self.oper_up = np.ones(len(self.port_names), dtype=bool)
        self._speed = np.asarray([speed_identity(s) for s in self.speed_bps])
        self._last_clear_ns = t0_ns
        self.clears: deque[int] = deque(maxlen=4096)  # times of clearing reads (watermark truth)
        self._lock = threading.Lock()

    def read(self, t_ns: int | None = None, *, clear: bool = True) -> tuple[int, dict[str, npt.NDArray[Any]]]:
        with self._lock:
            # A live read answers for the newest instant the queue model has simulated (the
            # ticker's), never advancing it itself: at 16,896 ports the gNMI servicer thread spent
            # 58 % of its time simulating for its reads and stopped answering (the scale bench's
            # streams all went stale). The device timestamp says which instant it is.
            t = min(time.time_ns(), self.queues.cursor_ns - 1) if t_ns is None else t_ns
            # never before the previous clear, nor before what the queue model still holds (a
            # read delayed on a starved box past its pruning answers for the oldest kept instant)
            t = max(t, self._last_clear_ns, self.queues.oldest_ns)
            v = self.read_counters(t, self.sl)
            leaves: dict[str, npt.NDArray[Any]] = {
                "in_octets": v[:, 0], "out_octets": v[:, 1],
                "in_discards": v[:, 4], "out_discards": v[:, 5], "in_errors": v[:, 6],
            }
            # the queue model runs for this switch's ports only (twin/fabric_queues.py)
            # (or_oldest: the ticker thread may prune past ``t`` between the check above and the
            # read — seen once in a scale run as a ValueError that ended the switch's stream)
            queues = self.queues.counters_at(t, self.sl, or_oldest=True)
            leaves.update(queue_leaves(queues, self.queues.cfg.pkt_bytes))
            # a watermark nobody read for longer than the queue history covers that history only
            since = max(self._last_clear_ns, self.queues.oldest_ns)
            peak = self.queues.peak_bytes(min(since, t), t, self.sl, or_oldest=True)
            leaves["q_max_len"] = np.floor(peak).astype(np.uint64)
            if clear:
                self._last_clear_ns = t
                self.clears.append(t)
            leaves["oper_status"] = np.where(self.oper_up, "UP", "DOWN")
            leaves["port_speed"] = self._speed
            return t, leaves
