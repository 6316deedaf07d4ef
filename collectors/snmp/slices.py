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
    a cell missing in one read  → NaN in that metric of that port only (no_cell)
    HC in one read, 32-bit in the other → NaN (width_changed); 32-bit only and the interval too
                                  long for the port's speed → withheld (wrap_ambiguous)
    counter unchanged, time moved → stale: NaN now, and the next rate runs from when the old
                                  value was first seen (:func:`hold_unchanged`)

Ports are matched to the agent's rows by ifName where it serves them (:func:`ifindex_by_name`): a
reboot that renumbers ifIndex re-maps the port instead of mixing two ports' counters.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from collectors.snmp.oids import COUNTER_WIDTH_BITS, FALLBACK_FOR
from collectors.snmp.poller import IfSnapshot
from fabricmon.core.telemetry.rates import CounterRead, RateReason, align_ports, counter_rates
from fabricmon.core.telemetry.slices import SLICE_METRICS, F32Array, SwitchSlice

U64Array = npt.NDArray[np.uint64]
I64Array = npt.NDArray[np.int64]
F64Array = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
U8Array = npt.NDArray[np.uint8]
I32Array = npt.NDArray[np.int32]

# A counter that has not changed for longer than this is idle (a rate of 0), not a cached value:
# agents refresh cached counters every 1-5 s (net-snmp's IF-MIB cache: about 3 s).
STALE_HOLD_S = 5.0
# The counters that fall back to 32-bit ifTable columns: only they get the wrap-ambiguity check
# (discards/errors are Counter32 by definition and count packets, far from wrapping twice).
_WRAP_CHECKED = frozenset(FALLBACK_FOR.values())
# What a port's health says for a withheld metric (the reason names of ``RateReason``).
REASON_TEXT = {
    "stale": "the agent repeated unchanged counters while time moved on (its counter cache): withheld; "
             "the next rate runs between the two real updates",
    "wrap_ambiguous": "only the 32-bit counter is served, and at this port's speed it can wrap more than "
                      "once per poll interval: withheld (poll faster, or serve ifXTable HC counters)",
    "no_cell": "the agent serves no valid cell of this counter for this port (in this or the last read)",
    "width_changed": "one read had the 64-bit HC counter, the other the 32-bit one: not comparable",
    "reset_decrease": "the counter went down: a reset, not a rate",
    "uptime_drop": "sysUpTime went back: the agent restarted",
    "discontinuity": "ifCounterDiscontinuityTime changed: the counters were reset",
    "above_line_rate": "more than the port's speed allows: a missed reset or wrap",
    "bad_interval": "the read times did not move forward",
    "bad_value": "a 32-bit counter above 2**32",
}  # fmt: skip

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
    # COUNTER_NAMES → int64 per port: when that cell's value was first read (Unix-epoch ns; a
    # value the agent repeated from its cache keeps the time it was first seen); a counter
    # without an entry (or None: an old snapshot or persisted read) was read at ``ts_ns``.
    cell_ts_ns: Mapping[str, I64Array] | None = None
    valid: Mapping[str, BoolArray] | None = None  # COUNTER_NAMES → the port's cell was there (None: all)
    bits: Mapping[str, U8Array] | None = None  # COUNTER_NAMES → 32 or 64 per port (None: COUNTER_WIDTH_BITS)
    # per port: its counters moved at their last change (a repeat is then a cached value, not idle)
    moving: BoolArray | None = None
    stale: BoolArray | None = None  # per port: this read repeated a cached value (not persisted)

    def read_ns(self, name: str) -> int | I64Array:
        """The read time(s) of counter ``name``: per port if known, else the read's one ts_ns."""
        if self.cell_ts_ns is not None and name in self.cell_ts_ns:
            return self.cell_ts_ns[name]
        return self.ts_ns

    def cell_ok(self, name: str) -> BoolArray:
        """Ports whose cell of counter ``name`` was read (present in the snapshot, valid)."""
        ok = self.present & (name in self.counters)
        if self.valid is not None and name in self.valid:
            ok = ok & self.valid[name]
        return np.asarray(ok, dtype=bool)

    def width(self, name: str) -> U8Array:
        if self.bits is not None and name in self.bits:
            return self.bits[name]
        return np.full(len(self.present), COUNTER_WIDTH_BITS[name], dtype=np.uint8)


def read_from_snapshot(snapshot: IfSnapshot, ifindex: npt.NDArray[np.int32]) -> SwitchRead:
    """Align a snapshot to the port order ``ifindex`` (the switch's slice of the port index)."""
    src = np.asarray(snapshot.ifindex, dtype=np.int64)
    counters: dict[str, U64Array] = {}
    present = align_ports(src, np.ones(len(src), dtype=bool), ifindex)[1]
    valid: dict[str, BoolArray] = {}
    bits: dict[str, U8Array] = {}
    for name in COUNTER_NAMES:
        if name in snapshot.counters:  # a column the agent does not serve stays absent (→ NaN)
            raw = np.asarray(snapshot.counters[name], dtype=np.uint64)
            counters[name] = align_ports(src, raw, ifindex)[0].astype(np.uint64)
            if snapshot.valid is not None and name in snapshot.valid:
                here = align_ports(src, np.asarray(snapshot.valid[name], dtype=bool), ifindex)[0]
                valid[name] = np.asarray(here, dtype=bool)
            if snapshot.counter_bits is not None and name in snapshot.counter_bits:
                b = align_ports(src, np.asarray(snapshot.counter_bits[name], dtype=np.uint8), ifindex)[0]
                bits[name] = np.where(present, b, COUNTER_WIDTH_BITS[name]).astype(np.uint8)
    if snapshot.speed_bps is not None and len(snapshot.speed_bps) == len(src):
        agent_speed = np.asarray(snapshot.speed_bps, dtype=np.float64)
        speed = np.where(present, align_ports(src, agent_speed, ifindex)[0], np.nan).astype(np.float64)
    else:  # an IfSnapshot built without the per-cell fields: ifHighSpeed alone
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
    stamped = {name: present & valid.get(name, present) for name in cell_ts}  # cells that were read
    if cell_ts and any(m.any() for m in stamped.values()):
        read_ns = int(min(int(ts[stamped[k]].min()) for k, ts in cell_ts.items() if stamped[k].any()))
    for name, ts in cell_ts.items():
        ts[~stamped[name]] = read_ns  # an absent port or cell is a gap anyway; keep its interval sane
    return SwitchRead(
        ts_ns=read_ns,
        sys_uptime_ticks=None if uptime is None else int(uptime),
        counters=counters,
        present=present,
        discontinuity_ticks=disc_aligned,
        speed_bps=speed,
        cell_ts_ns=cell_ts or None,
        valid=valid or None,
        bits=bits or None,
    )


def ifindex_by_name(
    ifindex: npt.ArrayLike, names: Sequence[str], agent_names: Mapping[int, str]
) -> tuple[I32Array, dict[str, tuple[int, int]]]:
    """Where each port (topology ``ifindex`` and ``names``, in port order) is on the agent now.

    A port whose name the agent serves (ifName) is at that ifIndex; a port whose name it does
    not serve keeps its configured ifIndex, unless another port's name now sits there (then it
    is nowhere: index 0, a gap, never another port's counters). An agent that serves no ifName
    changes nothing. Returns the ifIndex per port and ``{name: (configured, now)}`` of the moved.
    """
    configured = np.asarray(ifindex, dtype=np.int32)
    if not agent_names:
        return configured.copy(), {}
    at: dict[str, int] = {}
    for idx, name in agent_names.items():
        at.setdefault(name, int(idx))  # a name served twice: the lower ifIndex (sorted walk) wins
    taken = {at[n] for n in names if n in at}
    out = configured.copy()
    moved: dict[str, tuple[int, int]] = {}
    for k, name in enumerate(names):
        now = at.get(name)
        if now is None:
            now = 0 if int(configured[k]) in taken else int(configured[k])
        if now != int(configured[k]):
            moved[name] = (int(configured[k]), now)
        out[k] = now
    return out, moved


def hold_unchanged(prev: SwitchRead | None, cur: SwitchRead, *, hold_s: float = STALE_HOLD_S) -> SwitchRead:
    """Mark a read in which the agent repeated its counters unchanged although time moved on.

    Agents cache counters (net-snmp refreshes its IF-MIB cache about every 3 s; switch ASICs copy
    counters to the CPU on a timer), so a poll faster than the refresh reads the same values
    twice, and a rate over the poll's own interval swings between 0 and a multiple of the truth.
    A cache holds the whole table, so the evidence is switch-wide: not one octet counter of any
    port changed, while ports that moved at their last change exist and their values were first
    seen at most ``hold_s`` ago (and sysUpTime did not go back). Those ports are *stale*: their
    rates are withheld, and their cells keep the time the value was first seen, so the next rate
    runs between two real updates (first-seen to first-seen). A port that just stops while others
    move is idle (0), and so is everything once the hold is over. ``hold_s`` 0 turns this off.
    """
    keys = [k for k in ("in_octets", "out_octets") if k in cur.counters]
    n = len(cur.present)
    # A port is not known to move until a change is seen: a switch that is idle from the start is
    # idle (0), never "stale". The price: an agent whose cache holds from the first poll gives its
    # first refresh cycle as 0, 0, then the cycle's bytes over one interval (once, at first sight).
    fresh = replace(cur, moving=np.zeros(n, dtype=bool), stale=np.zeros(n, dtype=bool))
    if prev is None or not keys or len(prev.present) != n or any(k not in prev.counters for k in keys):
        return fresh
    if (prev.sys_uptime_ticks is not None and cur.sys_uptime_ticks is not None
            and cur.sys_uptime_ticks < prev.sys_uptime_ticks):  # fmt: skip
        return fresh  # restarted: every rate is dropped anyway, nothing to hold
    comparable = prev.present & cur.present
    changed = np.zeros(n, dtype=bool)
    for k in keys:
        comparable &= prev.cell_ok(k) & cur.cell_ok(k) & (prev.width(k) == cur.width(k))
        changed |= prev.counters[k] != cur.counters[k]
    changed &= comparable
    prev_moving = prev.moving if prev.moving is not None else np.zeros(n, dtype=bool)
    first_seen = np.broadcast_to(np.asarray(prev.read_ns(keys[0]), dtype=np.int64), (n,))
    now = np.broadcast_to(np.asarray(cur.read_ns(keys[0]), dtype=np.int64), (n,))
    held = comparable & prev_moving & (now > first_seen) & (now - first_seen <= round(hold_s * 1e9))
    repeated = bool(comparable.any()) and not bool(changed.any()) and bool(held.any())
    stale = held if repeated else np.zeros(n, dtype=bool)
    moving = np.where(stale, prev_moving, changed)
    cell_ts = dict(cur.cell_ts_ns or {})
    if stale.any():
        for name in cur.counters:
            theirs = np.broadcast_to(np.asarray(prev.read_ns(name), dtype=np.int64), (n,))
            mine = np.broadcast_to(np.asarray(cur.read_ns(name), dtype=np.int64), (n,))
            cell_ts[name] = np.where(stale, theirs, mine).astype(np.int64)
    return replace(cur, cell_ts_ns=cell_ts or None, moving=np.asarray(moving, dtype=bool),
                   stale=np.asarray(stale, dtype=bool))


def compute_slice(switch: str, prev: SwitchRead | None, cur: SwitchRead | None, spec_speed_bps: F64Array,
                  ts_ns: int) -> SwitchSlice:
    """Rates of one switch between two reads. ``ts_ns`` is used as the sample end when ``cur`` is None."""
    n = len(spec_speed_bps)
    nan = np.full(n, np.nan, dtype=np.float32)
    if cur is None or prev is None:
        reason = "gap" if cur is None else "no_baseline"
        return SwitchSlice(switch, None, cur.ts_ns if cur else ts_ns, dict.fromkeys(SLICE_METRICS, nan),
                           {reason: n})
    # The agent's speed (ifHighSpeed, else ifSpeed) is the port's real one (a 400G port may run at
    # 200G); where it says neither (a LAG, a tunnel, ifSpeed saturated at 4.29 Gb/s): the topology's.
    speed = np.where(np.isfinite(cur.speed_bps), cur.speed_bps, spec_speed_bps)
    metrics: dict[str, F32Array] = {}
    dropped: dict[str, int] = {}
    spans: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = {}
    reasons: dict[str, U8Array] = {}
    both_present = prev.present & cur.present
    stale = cur.stale if cur.stale is not None else np.zeros(n, dtype=bool)
    for name, metric, scale in _COUNTERS:
        if name not in prev.counters and name not in cur.counters:
            metrics[metric] = np.full(n, np.nan, dtype=np.float32)
            continue  # the agent serves this counter for no port: nothing to explain per port
        has_cells = prev.cell_ok(name) & cur.cell_ok(name)
        width = cur.width(name)
        same_width = prev.width(name) == width
        if name not in prev.counters or name not in cur.counters:
            why = np.where(both_present, RateReason.NO_CELL, RateReason.GAP).astype(np.uint8)
            rate = np.full(n, np.nan)
        else:
            rates = counter_rates(
                _counter_read(prev, name, has_cells & same_width), _counter_read(cur, name, None), speed,
                width_bits=width, unit="octets" if name.endswith("_octets") else "packets",
                wrap_check=name in _WRAP_CHECKED,
            )  # fmt: skip
            why, rate = rates.reason.copy(), rates.rate_per_s.copy()
            gap = why == RateReason.GAP
            why[gap & both_present & ~has_cells] = RateReason.NO_CELL
            why[gap & both_present & has_cells & ~same_width] = RateReason.WIDTH_CHANGED
            why[stale & np.isin(why, (RateReason.OK, RateReason.BAD_INTERVAL))] = RateReason.STALE
            rate[why != RateReason.OK] = np.nan
        metrics[metric] = (rate * scale).astype(np.float32)
        reasons[metric] = why
        spans[metric] = (np.broadcast_to(np.asarray(prev.read_ns(name), dtype=np.int64), (n,)),
                         np.broadcast_to(np.asarray(cur.read_ns(name), dtype=np.int64), (n,)))
        bad = why[why != RateReason.OK]
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
                       spans, reasons)


def _counter_read(read: SwitchRead, name: str, usable: BoolArray | None) -> CounterRead:
    """One counter of a read; ``usable`` (beside ``present``) marks the ports that may be differenced."""
    present = read.present if usable is None else read.present & usable
    return CounterRead(read.read_ns(name), read.counters[name], read.sys_uptime_ticks,
                       read.discontinuity_ticks, present)


# --- persisted reads (handover between collectors) ----------------------------------------------

_READ_MAGIC = b"FMR1"


def encode_read(read: SwitchRead) -> bytes:
    n = len(read.present)
    names = [c for c in COUNTER_NAMES if c in read.counters]
    stamped = [c for c in names if read.cell_ts_ns is not None and c in read.cell_ts_ns]
    # "cell_ts" was added later: its arrays go last, so an older decoder still reads the rest.
    valid = [c for c in names if read.valid is not None and c in read.valid]
    narrow = [c for c in names if read.bits is not None and c in read.bits]
    header = json.dumps({"ts_ns": read.ts_ns, "uptime": read.sys_uptime_ticks, "n": n, "counters": names,
                         "disc": read.discontinuity_ticks is not None, "cell_ts": stamped,
                         "valid": valid, "bits": narrow, "moving": read.moving is not None}).encode()
    parts = [np.ascontiguousarray(read.counters[c], dtype="<u8").tobytes() for c in names]
    parts.append(np.ascontiguousarray(read.present, dtype="u1").tobytes())
    parts.append(np.ascontiguousarray(read.speed_bps, dtype="<f8").tobytes())
    if read.discontinuity_ticks is not None:
        parts.append(np.ascontiguousarray(read.discontinuity_ticks, dtype="<i8").tobytes())
    for c in stamped:
        assert read.cell_ts_ns is not None
        parts.append(np.ascontiguousarray(read.cell_ts_ns[c], dtype="<i8").tobytes())
    # "valid", "bits", "moving" (issue 14) go after "cell_ts", for the same reason.
    for c in valid:
        assert read.valid is not None
        parts.append(np.ascontiguousarray(read.valid[c], dtype="u1").tobytes())
    for c in narrow:
        assert read.bits is not None
        parts.append(np.ascontiguousarray(read.bits[c], dtype="u1").tobytes())
    if read.moving is not None:
        parts.append(np.ascontiguousarray(read.moving, dtype="u1").tobytes())
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
        masks: list[dict[str, BoolArray | U8Array]] = [{}, {}]
        for j, (field, dtype) in enumerate((("valid", bool), ("bits", np.uint8))):
            for c in h.get(field, ()):
                if str(c) not in counters:
                    return None
                masks[j][str(c)] = np.frombuffer(blob, "u1", n, off).astype(dtype)
                off += n
        moving = np.frombuffer(blob, "u1", n, off).astype(bool) if h.get("moving") else None
    except (ValueError, KeyError, TypeError):
        return None
    return SwitchRead(int(h["ts_ns"]), h["uptime"], counters, present, disc, speed, cell_ts or None,
                      valid=masks[0] or None, bits=masks[1] or None, moving=moving)  # type: ignore[arg-type]
