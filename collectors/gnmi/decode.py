"""SubscribeResponse → per-(leaf, port) numpy arrays, fast, and never trusting the wire.

The hot loop does one thing per update: serialize its path (upb, C), look the bytes up in a
prebuilt ``path → slot`` dict, and append ``(slot, uint_val)``. Values land in numpy in one batch
per notification. Everything else — prefixes with origin/target, multi-key elems, enum strings,
wrong types, unknown paths, missing timestamps, values no 64-bit counter reaches — leaves the
fast path, is counted by kind, and skipped; the rest of the notification is kept.

State per target (arrays shaped (leaves, ports))::

    values  uint64  last value seen for each numeric leaf (counters exact, never via float)
    ts_ns   int64   device timestamp of that value (0 = never seen): rates use these, not arrival
    peak    uint64  max of gauge_max leaves (queue watermark) since the last take_peak()
    codes   int32   enum leaves (oper-status, port-speed) as codes
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from pygnmi.spec.v080 import gnmi_pb2 as pb

from collectors.gnmi.paths import LEAVES, OPER_STATUS, SPEED_BPS, path_key, slot_lookup

# No real 64-bit counter reaches 2**63 (≈ 3 years of 800G in octets); above that it is garbage.
HUGE_VALUE = 1 << 63
_FALLBACK_CACHE_MAX = 50_000
_GAUGE_ROWS = np.array([i for i, leaf in enumerate(LEAVES) if leaf.kind == "gauge_max"], dtype=np.intp)
_ENUMS = {"oper_status": OPER_STATUS, "port_speed": {k: v // 1_000_000_000 for k, v in SPEED_BPS.items()}}


class TargetArrays:
    """Decoded state of one target (see module docstring); ``problems`` counts skipped input."""

    def __init__(self, port_names: Sequence[str]) -> None:
        self.port_names = tuple(port_names)
        n_l, n_p = len(LEAVES), len(self.port_names)
        self.n_ports = n_p
        self.values = np.zeros((n_l, n_p), dtype=np.uint64)
        self.ts_ns = np.zeros((n_l, n_p), dtype=np.int64)
        self.peak = np.zeros((n_l, n_p), dtype=np.uint64)
        self.codes = np.zeros((n_l, n_p), dtype=np.int32)
        self.problems: Counter[str] = Counter()
        self.updates = 0
        self.last_ts_ns = 0
        self._lut = slot_lookup(self.port_names)
        # slots of enum leaves, and the fast-path dict without them (enums are rare: on change)
        self._enum_slots: dict[int, dict[str, int]] = {}
        for key, table in _ENUMS.items():
            li = next(i for i, leaf in enumerate(LEAVES) if leaf.key == key)
            for p in range(n_p):
                self._enum_slots[li * n_p + p] = table
        self._numeric = {k: s for k, s in self._lut.items() if s not in self._enum_slots}
        self._fallback: dict[bytes, int] = {}

    # ---- decoding -------------------------------------------------------------------------
    def apply(self, resp: pb.SubscribeResponse) -> str:
        """Apply one response; returns its kind: ``update``, ``sync``, ``error`` or ``empty``."""
        kind = resp.WhichOneof("response")
        if kind == "update":
            self.apply_notification(resp.update)
            return "update"
        if kind == "sync_response":
            return "sync"
        if kind == "error":
            self.problems["error_response"] += 1
            return "error"
        self.problems["empty_response"] += 1
        return "empty"

    def apply_notification(self, n: pb.Notification) -> int:
        """Decode one notification; returns how many updates were kept."""
        ts = n.timestamp
        if ts <= 0:
            self.problems["missing_timestamp"] += 1
            return 0
        if n.delete:
            self.problems["delete_ignored"] += len(n.delete)
        pre = pb.Path(elem=n.prefix.elem).SerializeToString() if n.prefix.elem else b""
        get = self._numeric.get
        slots: list[int] = []
        vals: list[int] = []
        other: list[tuple[bytes, pb.Update]] = []
        sa, va, oa = slots.append, vals.append, other.append
        for u in n.update:
            key = pre + u.path.SerializeToString()
            s = get(key)
            if s is not None:
                v = u.val
                if v.HasField("uint_val"):
                    sa(s)
                    va(v.uint_val)
                    continue
            oa((key, u))
        if other:
            self._slow_path(n, other, slots, vals)
        kept = self._store(slots, vals, ts)
        self.updates += kept
        self.last_ts_ns = max(self.last_ts_ns, ts)
        return kept

    def _store(self, slots: list[int], vals: list[int], ts: int) -> int:
        if not slots:
            return 0
        s = np.asarray(slots, dtype=np.intp)
        v = np.asarray(vals, dtype=np.uint64)
        huge = v >= HUGE_VALUE
        if huge.any():
            self.problems["huge_value"] += int(huge.sum())
            s, v = s[~huge], v[~huge]
        flat_v, flat_t, flat_pk = self.values.reshape(-1), self.ts_ns.reshape(-1), self.peak.reshape(-1)
        flat_v[s] = v
        flat_t[s] = ts
        # watermarks: keep the max over every sample until the frame builder takes it
        np.maximum.at(flat_pk, s, v)
        return len(s)

    def _slow_path(
        self, n: pb.Notification, other: list[tuple[bytes, pb.Update]], slots: list[int], vals: list[int]
    ) -> None:
        for key, u in other:
            s = self._resolve(key, n.prefix, u.path)
            if s is None:
                self.problems["unknown_path"] += 1
                continue
            v = u.val
            table = self._enum_slots.get(s)
            if table is not None:
                if v.HasField("string_val") and v.string_val.rsplit(":", 1)[-1] in table:
                    code = table[v.string_val.rsplit(":", 1)[-1]]
                    self.codes.reshape(-1)[s] = code
                    self.ts_ns.reshape(-1)[s] = n.timestamp
                    self.updates += 1
                else:
                    self.problems["wrong_type"] += 1
                continue
            if v.HasField("uint_val"):
                slots.append(s)
                vals.append(v.uint_val)
            elif v.HasField("int_val") and v.int_val >= 0:  # some targets send counters signed
                slots.append(s)
                vals.append(v.int_val)
            else:
                self.problems["wrong_type"] += 1

    def _resolve(self, key: bytes, prefix: pb.Path, path: pb.Path) -> int | None:
        s = self._lut.get(key)
        if s is not None:
            return s
        s = self._fallback.get(key, -1)
        if s != -1:
            return s if s >= 0 else None
        full = pb.Path(elem=[*prefix.elem, *path.elem])
        found = self._lut.get(path_key(full))
        if len(self._fallback) > _FALLBACK_CACHE_MAX:  # garbage paths must not grow memory
            self._fallback.clear()
        self._fallback[key] = -2 if found is None else found
        return found

    # ---- reading --------------------------------------------------------------------------
    def take_peak(self) -> npt.NDArray[np.uint64]:
        """Max of each gauge_max leaf since the last take (0 = none seen), then restart from 0."""
        out = self.peak[_GAUGE_ROWS].copy()
        self.peak[_GAUGE_ROWS] = 0
        return out

    def row(self, key: str) -> int:
        return next(i for i, leaf in enumerate(LEAVES) if leaf.key == key)
