"""An SNMP switch's slice of a frame: two interface-table reads → rates → the frame metrics.

A poll returns a snapshot of one switch (:class:`~collectors.snmp.poller.IfSnapshot`). It is first aligned to
the switch's ports in the fabric's :class:`~fabricmon.core.topology.port_index.PortIndex` (a
:class:`SwitchRead`, raw counters as ``uint64``), then turned into rates against the previous read
with :func:`fabricmon.core.telemetry.rates.counter_rates`::

    prev read ──▶ cur read            in_octets/out_octets: Counter64 → in_bps, out_bps, util
                                       discards/errors:      Counter32 → *_ps
    cur is None (poll failed)   → every metric NaN (an explicit gap, never a carried value)
    prev is None (first poll)   → NaN (nothing to difference against yet)
    reset / wrap / discontinuity → NaN for the affected ports (reason codes kept for health)

Everything is array arithmetic on the switch's port slice; no per-port Python loops.

Each port's rate runs between the read times of *its own* cells (``IfSnapshot.cell_ts_ns``: the
midpoint of the request/response that carried the cell), not the poll's one timestamp: a walk of
a big leaf takes several round trips (17-300 ms under load) while bursty MoE traffic moves the
rate, which put single samples ~1 % of line rate off with one timestamp per poll.

A read is also persisted to Redis (:func:`encode_read`) so that a collector taking over a shard
differences against the last holder's read instead of losing one sample per handover.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.snmp.oids import COUNTER_WIDTH_BITS
from collectors.snmp.poller import IfSnapshot
from fabricmon.core.telemetry.rates import CounterRead, RateReason, align_ports, counter_rates
from fabricmon.core.telemetry.slices import SLICE_METRICS, F32Array, SwitchSlice

U64Array = npt.NDArray[np.uint64]
I64Array = npt.NDArray[np.int64]
F64Array = npt.NDArray[np.float64]

# Snapshot counter → (frame metric, scale); widths are ``oids.COUNTER_WIDTH_BITS``. Octets are
# bytes: x8 for bit/s.
_COUNTERS: tuple[tuple[str, str, float], ...] = (
    ("in_octets", "in_bps", 8.0),
    ("out_octets", "out_bps", 8.0),
    ("in_discards", "in_discards_ps", 1.0),
    ("out_discards", "out_discards_ps", 1.0),
    ("in_errors", "in_errors_ps", 1.0),
)
COUNTER_NAMES = tuple(c[0] for c in _COUNTERS)


@dataclass(frozen=True)
class SwitchRead:
    """One successful poll of one switch, aligned to the switch's ports in the port index."""

    ts_ns: int
    sys_uptime_ticks: int | None
    counters: Mapping[str, U64Array]  # COUNTER_NAMES → uint64 per port
    present: npt.NDArray[np.bool_]  # the agent reported this port
    discontinuity_ticks: npt.NDArray[np.int64] | None
    speed_bps: F64Array  # from ifHighSpeed; NaN where the agent did not say
    # COUNTER_NAMES → int64 per port: when that cell was read (Unix-epoch ns); a counter without
    # an entry (or None: an old snapshot or persisted read) was read at ``ts_ns``.
    cell_ts_ns: Mapping[str, I64Array] | None = None

    def read_ns(self, name: str) -> int | I64Array:
        """The read time(s) of counter ``name``: per port if known, else the read's one ts_ns."""
        if self.cell_ts_ns is not None and name in self.cell_ts_ns:
            return self.cell_ts_ns[name]
        return self.ts_ns


def read_from_snapshot(snapshot: IfSnapshot, ifindex: npt.NDArray[np.int32]) -> SwitchRead:
    """Align a snapshot to the port order ``ifindex`` (the switch's slice of the port index)."""
    src = np.asarray(snapshot.ifindex, dtype=np.int64)
    counters: dict[str, U64Array] = {}
    present = align_ports(src, np.ones(len(src), dtype=bool), ifindex)[1]
    for name in COUNTER_NAMES:
        if name in snapshot.counters:  # a column the agent does not serve stays absent (→ NaN)
            raw = np.asarray(snapshot.counters[name], dtype=np.uint64)
            counters[name] = align_ports(src, raw, ifindex)[0].astype(np.uint64)
    high_speed = np.asarray(snapshot.high_speed_mbps, dtype=np.float64)
    speed_mbps = align_ports(src, high_speed, ifindex)[0].astype(np.float64)
    speed = np.where(speed_mbps > 0, speed_mbps * 1e6, np.nan)
    disc = snapshot.discontinuity_ticks
    disc_aligned = None
    if disc is not None and len(np.asarray(disc)) == len(src):
        disc_aligned = align_ports(src, np.asarray(disc, dtype=np.int64), ifindex)[0].astype(np.int64)
    uptime = snapshot.sys_uptime_ticks
    # When were the counters read? The agent reads them as each GETBULK arrives, so a poller that
    # stamps each cell with its response's round-trip midpoint (``cell_ts_ns``) says it per port;
    # the read's one ``ts_ns`` is then its earliest cell (the first response). Without per-cell
    # stamps: the poll start, since the poll's midpoint lags the reads by the client's decoding.
    read_ns = int(snapshot.ts_ns) - round(float(snapshot.duration_s) * 5e8)
    cell_ts: dict[str, I64Array] = {}
    for name, stamps in (snapshot.cell_ts_ns or {}).items():
        if name in counters and len(stamps) == len(src):
            cell_ts[name] = align_ports(src, np.asarray(stamps, dtype=np.int64), ifindex)[0].astype(np.int64)
    if cell_ts and present.any():
        read_ns = int(min(int(ts[present].min()) for ts in cell_ts.values()))
    for ts in cell_ts.values():
        ts[~present] = read_ns  # an absent port is a gap anyway; keep its interval sane
    return SwitchRead(
        ts_ns=read_ns,
        sys_uptime_ticks=None if uptime is None else int(uptime),
        counters=counters,
        present=present,
        discontinuity_ticks=disc_aligned,
        speed_bps=speed,
        cell_ts_ns=cell_ts or None,
    )


def compute_slice(switch: str, prev: SwitchRead | None, cur: SwitchRead | None, spec_speed_bps: F64Array,
                  ts_ns: int) -> SwitchSlice:
    """Rates of one switch between two reads. ``ts_ns`` is used as the sample end when ``cur`` is None."""
    n = len(spec_speed_bps)
    nan = np.full(n, np.nan, dtype=np.float32)
    if cur is None or prev is None:
        reason = "gap" if cur is None else "no_baseline"
        return SwitchSlice(switch, None, cur.ts_ns if cur else ts_ns, dict.fromkeys(SLICE_METRICS, nan),
                           {reason: n})
    # The agent's ifHighSpeed is the port's real speed (a 400G port may run at 200G); else the spec.
    speed = np.where(np.isfinite(cur.speed_bps), cur.speed_bps, spec_speed_bps)
    metrics: dict[str, F32Array] = {}
    dropped: dict[str, int] = {}
    spans: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = {}
    for name, metric, scale in _COUNTERS:
        if name not in prev.counters or name not in cur.counters:
            metrics[metric] = np.full(n, np.nan, dtype=np.float32)
            continue
        rates = counter_rates(
            _counter_read(prev, name), _counter_read(cur, name), speed,
            width_bits=COUNTER_WIDTH_BITS[name], unit="octets" if name.endswith("_octets") else "packets",
        )
        metrics[metric] = (rates.rate_per_s * scale).astype(np.float32)
        spans[metric] = (np.broadcast_to(np.asarray(prev.read_ns(name), dtype=np.int64), (n,)),
                         np.broadcast_to(np.asarray(cur.read_ns(name), dtype=np.int64), (n,)))
        bad = rates.reason[rates.reason != RateReason.OK]
        if len(bad):
            codes, counts = np.unique(bad, return_counts=True)
            for code, k in zip(codes, counts, strict=True):
                key = RateReason(int(code)).name.lower()
                dropped[key] = dropped.get(key, 0) + int(k)
    with np.errstate(invalid="ignore", divide="ignore"):
        # np.maximum propagates NaN: a port whose in- or out-rate was dropped has no utilisation.
        util = np.maximum(metrics["in_bps"], metrics["out_bps"]) / np.where(speed > 0, speed, np.nan)
    metrics["util"] = util.astype(np.float32)
    return SwitchSlice(switch, prev.ts_ns, cur.ts_ns, {m: metrics[m] for m in SLICE_METRICS}, dropped,
                       spans)


def _counter_read(read: SwitchRead, name: str) -> CounterRead:
    return CounterRead(read.read_ns(name), read.counters[name], read.sys_uptime_ticks,
                       read.discontinuity_ticks, read.present)


# --- persisted reads (handover between collectors) ----------------------------------------------

_READ_MAGIC = b"FMR1"


def encode_read(read: SwitchRead) -> bytes:
    n = len(read.present)
    names = [c for c in COUNTER_NAMES if c in read.counters]
    stamped = [c for c in names if read.cell_ts_ns is not None and c in read.cell_ts_ns]
    # "cell_ts" was added later: its arrays go last, so an older decoder still reads the rest.
    header = json.dumps({"ts_ns": read.ts_ns, "uptime": read.sys_uptime_ticks, "n": n, "counters": names,
                         "disc": read.discontinuity_ticks is not None, "cell_ts": stamped}).encode()
    parts = [np.ascontiguousarray(read.counters[c], dtype="<u8").tobytes() for c in names]
    parts.append(np.ascontiguousarray(read.present, dtype="u1").tobytes())
    parts.append(np.ascontiguousarray(read.speed_bps, dtype="<f8").tobytes())
    if read.discontinuity_ticks is not None:
        parts.append(np.ascontiguousarray(read.discontinuity_ticks, dtype="<i8").tobytes())
    for c in stamped:
        assert read.cell_ts_ns is not None
        parts.append(np.ascontiguousarray(read.cell_ts_ns[c], dtype="<i8").tobytes())
    return _READ_MAGIC + struct.pack("<I", len(header)) + header + b"".join(parts)


def decode_read(blob: bytes) -> SwitchRead | None:
    """The persisted read, or None if the blob is not one (an old format is simply not used)."""
    if len(blob) < 8 or blob[:4] != _READ_MAGIC:
        return None
    (hlen,) = struct.unpack_from("<I", blob, 4)
    try:
        h = json.loads(blob[8 : 8 + hlen])
        n = int(h["n"])
        off = 8 + hlen
        counters = {}
        for c in h["counters"]:
            counters[str(c)] = np.frombuffer(blob, "<u8", n, off).astype(np.uint64)
            off += 8 * n
        present = np.frombuffer(blob, "u1", n, off).astype(bool)
        off += n
        speed = np.frombuffer(blob, "<f8", n, off).astype(np.float64)
        off += 8 * n
        disc = None
        if h["disc"]:
            disc = np.frombuffer(blob, "<i8", n, off).astype(np.int64)
            off += 8 * n
        cell_ts = {}
        for c in h.get("cell_ts", ()):
            if str(c) not in counters:
                return None
            cell_ts[str(c)] = np.frombuffer(blob, "<i8", n, off).astype(np.int64)
            off += 8 * n
    except (ValueError, KeyError, TypeError):
        return None
    return SwitchRead(int(h["ts_ns"]), h["uptime"], counters, present, disc, speed, cell_ts or None)
