"""Phase events as columns: the in-memory form of one ingested batch and its compact stored block.

Events are many (millions per run, batches of ~1,000), so they are neither validated nor stored
one Python object at a time: a batch becomes numpy columns (rank, step, layer, phase, start/end
ns, bytes, …) plus flat per-peer arrays, and is stored as two blobs per batch (``EventBlock``
``columns`` and ``peers``)::

    columns = u32 header length | orjson header {n, columns: [[name, dtype, nbytes], …],
                                                 ids: [...], strings: {collective: [...], …}}
            | column bytes, each narrowed to the smallest int type that holds it
    peers   = the same layout, holding only send_peer, send_bytes, recv_peer, recv_bytes

Absent optional integers (step, layer, seq, byte totals) are stored as -1; absent per-peer maps
as a count of -1 (``{}`` is a count of 0). No Django here: ``services`` does the writing.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import orjson

from collectors.traces.schema import PHASES, SOURCES, TIME_KINDS

NONE = -1  # an absent optional non-negative integer
PHASE_CODE = {p: i for i, p in enumerate(PHASES)}
SOURCE_CODE = {s: i for i, s in enumerate(SOURCES)}
TIME_KIND_CODE = {t: i for i, t in enumerate(TIME_KINDS)}
_PHASES_A, _SOURCES_A, _TIME_KINDS_A = (np.array(v, dtype=object) for v in (PHASES, SOURCES, TIME_KINDS))

INT_COLUMNS = (
    "rank",
    "step",
    "layer",
    "seq",
    "phase",
    "source",
    "time_kind",
    "start_ns",
    "end_ns",
    "clock_offset_ns",
    "bytes_sent",
    "bytes_recv",
    "send_n",
    "recv_n",
)
PEER_COLUMNS = ("send_peer", "send_bytes", "recv_peer", "recv_bytes")
STR_COLUMNS = ("collective", "pg", "pg_ranks", "host")


@dataclass
class EventColumns:
    """n events as parallel columns (int64 arrays; phase/source/time_kind as codes into the
    schema tuples; strings as lists) and flat per-peer arrays in event order (``send_n[i]``
    entries of ``send_peer``/``send_bytes`` belong to event i)."""

    event_id: list[str]
    rank: np.ndarray
    step: np.ndarray
    layer: np.ndarray
    seq: np.ndarray
    phase: np.ndarray
    source: np.ndarray
    time_kind: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    clock_offset_ns: np.ndarray
    bytes_sent: np.ndarray
    bytes_recv: np.ndarray
    send_n: np.ndarray
    recv_n: np.ndarray
    send_peer: np.ndarray
    send_bytes: np.ndarray
    recv_peer: np.ndarray
    recv_bytes: np.ndarray
    collective: list[str]
    pg: list[str]
    pg_ranks: list[str]  # "0,1,2,3" (group rank i → global rank), "" when unknown
    host: list[str]

    def __len__(self) -> int:
        return len(self.event_id)

    def select(self, mask: np.ndarray) -> EventColumns:
        """The events where ``mask`` is true (a boolean array of length n), peers included."""
        return self.take(np.flatnonzero(mask))

    def take(self, idx: np.ndarray) -> EventColumns:
        """The events at ``idx`` in that order (a selection or a reordering), peers included."""
        out: dict[str, Any] = {}
        for name in INT_COLUMNS:
            out[name] = getattr(self, name)[idx]
        idx_list = idx.tolist()
        for name in (*STR_COLUMNS, "event_id"):
            values = getattr(self, name)
            out[name] = [values[i] for i in idx_list]
        for kind in ("send", "recv"):
            counts = np.maximum(getattr(self, f"{kind}_n"), 0)
            starts = np.cumsum(counts) - counts
            c = counts[idx]
            flat = np.repeat(starts[idx] - (np.cumsum(c) - c), c) + np.arange(int(c.sum()))
            out[f"{kind}_peer"] = getattr(self, f"{kind}_peer")[flat]
            out[f"{kind}_bytes"] = getattr(self, f"{kind}_bytes")[flat]
        return EventColumns(**out)

    def peer_event_index(self, kind: str) -> np.ndarray:
        """For each flat ``{kind}_peer`` entry, the index of the event it belongs to."""
        counts = np.maximum(getattr(self, f"{kind}_n"), 0)
        return np.repeat(np.arange(len(self), dtype=np.int64), counts)


def empty_columns() -> EventColumns:
    z = np.zeros(0, dtype=np.int64)
    return EventColumns(
        **{f.name: ([] if f.name in (*STR_COLUMNS, "event_id") else z) for f in fields(EventColumns)}
    )


def concat(parts: Sequence[EventColumns]) -> EventColumns:
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty_columns()
    if len(parts) == 1:
        return parts[0]
    out: dict[str, Any] = {}
    for f in fields(EventColumns):
        values = [getattr(p, f.name) for p in parts]
        out[f.name] = (
            [v for vs in values for v in vs] if isinstance(values[0], list) else np.concatenate(values)
        )
    return EventColumns(**out)


def _opt(v: int | None) -> int:
    return NONE if v is None else v


def columns_from_rows(rows: Sequence[tuple[Any, ...]], peers: Sequence[tuple[Any, Any]]) -> EventColumns:
    """Validated row tuples (``validation.ROW_FIELDS`` order) and their per-peer maps → columns.
    The slow path (importers, lines the fast parser sent to the careful validator)."""
    if not rows:
        return empty_columns()
    cols = list(zip(*rows, strict=True))
    (eid, rank, step, layer, phase, coll, pg, pg_ranks, seq, start, end, off, bsent, brecv) = cols[:14]
    source, time_kind, host = cols[15], cols[16], cols[17]
    flat: dict[str, list[int]] = {k: [] for k in ("send_n", "recv_n", *PEER_COLUMNS)}
    for send, recv in peers:
        for kind, peer_map in (("send", send), ("recv", recv)):
            if peer_map is None:
                flat[f"{kind}_n"].append(NONE)
                continue
            flat[f"{kind}_n"].append(len(peer_map))
            flat[f"{kind}_peer"].extend(map(int, peer_map))
            flat[f"{kind}_bytes"].extend(peer_map.values())

    def a(values: Sequence[Any]) -> np.ndarray:
        return np.array(values, dtype=np.int64)

    return EventColumns(
        event_id=list(eid),
        rank=a(rank),
        step=a([_opt(v) for v in step]),
        layer=a([_opt(v) for v in layer]),
        seq=a([_opt(v) for v in seq]),
        phase=a([PHASE_CODE[p] for p in phase]),
        source=a([SOURCE_CODE[s] for s in source]),
        time_kind=a([TIME_KIND_CODE[t] for t in time_kind]),
        start_ns=a(start),
        end_ns=a(end),
        clock_offset_ns=a(off),
        bytes_sent=a([_opt(v) for v in bsent]),
        bytes_recv=a([_opt(v) for v in brecv]),
        **{k: a(v) for k, v in flat.items()},
        collective=list(coll),
        pg=list(pg),
        pg_ranks=list(pg_ranks),
        host=list(host),
    )


# --- idempotency keys ----------------------------------------------------------------------------

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def id_hashes(ids: Sequence[str]) -> np.ndarray:
    """A stable 64-bit hash of each event id (int64), computed for the whole batch at once:
    the ids' UTF-32 code units as uint64 words folded with a splitmix64-style mix. (The keys of
    migration 0016 and before; ``id_keys`` is what a claim uses now.)"""
    n = len(ids)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    units, lens = _code_units(ids)
    return _fold(units, lens).view(np.int64)


def _code_units(ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(n, even width) uint32 code units of the ids, zero past each id's end, and their lengths."""
    width = max(2, *map(len, ids))
    width += width % 2  # two UTF-32 code units per uint64 word
    units = np.array(ids, dtype=f"<U{width}").view("<u4").reshape(len(ids), width)
    return units, np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))


def _fold(units: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The hash (uint64) of each row's first ``lens`` code units (zero past them)."""
    words = units.view("<u8")
    n_words = (lens + 1) // 2  # words past an id's end are padding: they must not change its hash
    with np.errstate(over="ignore"):
        h = lens.astype(np.uint64) * _GOLD
        for j in range(words.shape[1]):
            mixed = (h ^ words[:, j]) * _M1
            mixed ^= mixed >> np.uint64(31)
            h = np.where(n_words > j, mixed, h)
        h ^= h >> np.uint64(30)
        h *= _M2
        h ^= h >> np.uint64(27)
    return h


SEQ_BLOCK = 64  # consecutive sequence numbers that share one claim row (one bit each)
MAX_SEQ_DIGITS = 18  # a longer digit suffix is not read as a number (it could overflow int64)
_TAG_SEQ, _TAG_WHOLE = np.uint64(0x5851F42D4C957F2D), np.uint64(0x2545F4914F6CDD1D)
_POW10 = 10 ** np.arange(MAX_SEQ_DIGITS + 1, dtype=np.uint64)
# one odd constant per 64-bit word of an id (ingest caps ids at 80 code units: 40 words; longer
# ones, from before the cap or elsewhere, get theirs made on the spot)
_WORD_KEYS = (np.arange(1, 41, dtype=np.uint64) * _GOLD) | np.uint64(1)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, in place (a bijection of uint64)."""
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def _prefix_hash(words: np.ndarray, prefix: np.ndarray, unit_bits: int) -> np.ndarray:
    """A 64-bit hash of the first ``prefix[i]`` code units (``unit_bits`` wide) of each column
    ``i`` of ``words`` (uint64 words of the ids' code units, one id per column, zero past its
    end): a sum over its words of mix(word + k_j) - mix(k_j) (zero for a zero word, so what lies
    past the prefix is cut to zeros and drops out), mixed with the length. One pass over the
    batch, no loop per id or word (columns: the sums run along rows, which numpy does fast)."""
    per_word = 64 // unit_bits
    j = np.arange(words.shape[0])[:, None]
    full, part = prefix // per_word, (prefix % per_word).astype(np.uint64)
    partial = np.left_shift(np.uint64(1), part * np.uint64(unit_bits)) - np.uint64(1)
    keep = np.where(j < full, ~np.uint64(0), np.where(j == full, partial, np.uint64(0)))
    with np.errstate(over="ignore"):
        n_words = words.shape[0]
        k = (_WORD_KEYS if n_words <= len(_WORD_KEYS) else
             (np.arange(1, n_words + 1, dtype=np.uint64) * _GOLD) | np.uint64(1))[:n_words, None]
        parts = _mix((words & keep) + k) - _mix(k.copy())
        h = parts.sum(axis=0, dtype=np.uint64) ^ (prefix.astype(np.uint64) * _GOLD)
    return _mix(h)


def id_keys(ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(key, bit) of each event id: what a run's claim rows (``models.EventIdSet``) hold.

    Ids nearly always end in a sequence number (the probe's ``{session}-{rank}-{pg}-{seq}``, the
    importers' ``fr{rank}-{pg}-c{seq}``), so an id is cut into its prefix and that number *s*:
    ids with one prefix and one ``s // 64`` share a key, and ``s % 64`` is the id's bit in it —
    a batch's 1,000 ids are ~20 keys, not 1,000. The number is the id's trailing ASCII digits
    (1–18 of them, no leading zero unless it is "0": "b01" and "b1" are different ids, so "b01"
    is not numbered). An id without such a number is a key of its own (bit 0). Keys are 64-bit
    hashes of (prefix, s // 64) or of the whole id, in disjoint tagged domains; at 10 M keys a
    run has ~3e-6 odds of one false duplicate. An ASCII id is hashed by its bytes, any other by
    its UTF-32 code units (4x the words to mix), whatever else its batch holds."""
    n = len(ids)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lens = np.fromiter(map(len, ids), dtype=np.int64, count=n)
    try:
        return _keys(np.array(ids, dtype=f"S{-(-int(lens.max()) // 8) * 8 or 8}"), lens, 8)
    except UnicodeEncodeError:  # (numpy's "S" takes ASCII only)
        pass
    wide = ~np.fromiter(map(str.isascii, ids), dtype=bool, count=n)
    key, bit = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    narrow = np.flatnonzero(~wide)
    if len(narrow):
        key[narrow], bit[narrow] = id_keys([ids[i] for i in narrow.tolist()])
    at = np.flatnonzero(wide)
    width = -(-int(lens[at].max()) // 2) * 2
    units = np.array([ids[i] for i in at.tolist()], dtype=f"<U{width}").view("<u4").reshape(len(at), width)
    key[at], bit[at] = _keys(units, lens[at], 32)
    return key, bit


def _keys(cells: np.ndarray, lens: np.ndarray, unit_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """``id_keys`` of ids given as their code units (n rows of a multiple of 8 bytes, zero past
    each id's end: numpy "S" bytes or "U" UTF-32) and their lengths."""
    n = len(lens)
    units = cells.view(f"<u{unit_bits // 8}").reshape(n, -1)
    cols = np.ascontiguousarray(units.T)  # (code unit, id): numpy's reductions run along rows
    width = len(cols)
    tail = min(width, MAX_SEQ_DIGITS + 1)  # enough to tell 18 digits from more
    back = np.arange(1, tail + 1)[:, None]  # 1 = an id's last code unit, 2 the one before, …
    at = lens - back
    last = cols.reshape(-1)[np.maximum(at, 0) * n + np.arange(n)] - ord("0")
    digit = (at >= 0) & (last <= 9)  # (unsigned: a code unit below "0" wraps high)
    run = np.where(digit.all(axis=0), tail, np.argmin(digit, axis=0))  # trailing digits
    first_digit = last[np.maximum(run, 1) - 1, np.arange(n)]
    numbered = (run >= 1) & (run <= MAX_SEQ_DIGITS) & ((run == 1) | (first_digit != 0))
    in_number = (back <= run) & numbered
    seq = (np.where(in_number, last, 0).astype(np.uint64) * _POW10[:tail, None]).sum(axis=0, dtype=np.uint64)
    words = np.ascontiguousarray(units.view("<u8").T)  # (word, id)
    h = _prefix_hash(words, np.where(numbered, lens - run, lens), unit_bits)
    with np.errstate(over="ignore"):
        key = _mix(np.where(numbered, h ^ _TAG_SEQ ^ (seq >> np.uint64(6)), h ^ _TAG_WHOLE))
    bit = np.where(numbered, seq & np.uint64(SEQ_BLOCK - 1), np.uint64(0)).astype(np.int64)
    return key.view(np.int64), bit


# --- stored blocks --------------------------------------------------------------------------------

_INT_TYPES = (np.int8, np.int16, np.int32, np.int64)


def _narrow(a: np.ndarray, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    """``a`` in the smallest int type that holds its values (``lo``/``hi``: its range, if known)."""
    if a.size == 0:
        return a.astype(np.int8)
    if lo is None or hi is None:
        lo, hi = int(a.min()), int(a.max())
    for t in _INT_TYPES:
        info = _INT_INFO[t]
        if info.min <= lo and hi <= info.max:
            return a.astype(t, copy=False)
    return a


_INT_INFO = {t: np.iinfo(t) for t in _INT_TYPES}


def _string_table(values: list[str]) -> tuple[list[str], np.ndarray]:
    table = list(dict.fromkeys(values))
    if len(table) == 1:
        return table, np.zeros(len(values), dtype=np.int64)
    index = {v: i for i, v in enumerate(table)}
    return table, np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))


def _pack(arrays: list[tuple[str, np.ndarray]], extra: dict[str, Any]) -> bytes:
    spec, chunks = [], []
    n = len(arrays[0][1])
    if n and all(len(a) == n for _, a in arrays):  # the ranges of all columns in two calls, not 2 a column
        stacked = np.stack([a for _, a in arrays])
        ranges = zip(stacked.min(axis=1).tolist(), stacked.max(axis=1).tolist(), strict=True)
    else:
        ranges = ((None, None) for _ in arrays)
    for (name, a), (lo, hi) in zip(arrays, ranges, strict=False):
        narrow = _narrow(a, lo, hi)
        raw = narrow.astype(narrow.dtype.newbyteorder("<"), copy=False).tobytes()
        spec.append([name, narrow.dtype.newbyteorder("<").str, len(raw)])
        chunks.append(raw)
    header = orjson.dumps({**extra, "columns": spec})
    return b"".join([struct.pack("<I", len(header)), header, *chunks])


def encode_block(cols: EventColumns) -> tuple[bytes, bytes]:
    """Columns → two compact blobs (see the module docstring): the per-event columns, and the
    flat per-peer arrays apart. A job's all-to-all reports every peer's bytes — ~3 KB an event at
    256 ranks against ~50 bytes for the rest — and most readers (the run timeline, the phase
    views, markers) need only the per-event columns, so they read only that blob."""
    arrays: list[tuple[str, np.ndarray]] = [(name, getattr(cols, name)) for name in INT_COLUMNS]
    strings: dict[str, list[str]] = {}
    for name in STR_COLUMNS:
        table, codes = _string_table(getattr(cols, name))
        strings[name] = table
        arrays.append((name, codes))
    core = _pack(arrays, {"n": len(cols), "ids": cols.event_id, "strings": strings})
    peers = _pack([(name, getattr(cols, name)) for name in PEER_COLUMNS], {})
    return core, peers


def _unpack(blob: bytes, out: dict[str, Any]) -> dict[str, Any]:
    (hlen,) = struct.unpack_from("<I", blob)
    header = orjson.loads(blob[4 : 4 + hlen])
    pos = 4 + hlen
    for name, dtype, nbytes in header["columns"]:
        a = np.frombuffer(blob, dtype=dtype, count=nbytes // np.dtype(dtype).itemsize, offset=pos)
        pos += nbytes
        if name in STR_COLUMNS:
            table = header["strings"][name]
            out[name] = [table[i] for i in a.tolist()]
        else:
            out[name] = a.astype(np.int64)
    return header


def decode_block(blob: bytes | memoryview, peers: bytes | memoryview | None = None) -> EventColumns:
    """A stored block back to columns: its per-event blob and its per-peer blob (blocks stored
    before the two were split hold the per-peer arrays in the first)."""
    out: dict[str, Any] = {}
    header = _unpack(bytes(blob), out)
    if peers:
        _unpack(bytes(peers), out)
    return EventColumns(event_id=header["ids"], **out)


def block_event_ids(blob: bytes | memoryview) -> list[str]:
    """The event ids a block holds (its header only; no column is decoded)."""
    view = memoryview(blob)
    (hlen,) = struct.unpack_from("<I", view)
    ids: list[str] = orjson.loads(bytes(view[4 : 4 + hlen]))["ids"]
    return ids


def decode_fields(blob: bytes | memoryview, names: Sequence[str]) -> dict[str, np.ndarray]:
    """Only the named integer columns of a block (no ids, no strings, no peers): what an
    aggregate over many blocks needs, at a fraction of :func:`decode_block`'s cost."""
    blob = bytes(blob)
    (hlen,) = struct.unpack_from("<I", blob)
    header = orjson.loads(blob[4 : 4 + hlen])
    wanted, pos, out = set(names), 4 + hlen, {}
    for name, dtype, nbytes in header["columns"]:
        if name in wanted:
            a = np.frombuffer(blob, dtype=dtype, count=nbytes // np.dtype(dtype).itemsize, offset=pos)
            out[name] = a.astype(np.int64)
        pos += nbytes
    missing = wanted - out.keys()
    if missing:
        raise ValueError(f"block has no column(s) {sorted(missing)}")
    return out


# --- back to event dicts ---------------------------------------------------------------------------

EXPORT_FIELDS = (
    "event_id",
    "rank",
    "host",
    "step",
    "layer",
    "phase",
    "collective",
    "pg",
    "pg_ranks",
    "seq",
    "start_ns",
    "end_ns",
    "clock_offset_ns",
    "bytes_sent",
    "bytes_recv",
    "source",
    "time_kind",
)


def iter_dicts(
    cols: EventColumns, order: np.ndarray | None = None, *, host_times: bool = False
) -> Iterator[dict[str, Any]]:
    """Each event as a dict: ``EXPORT_FIELDS`` plus ``send_bytes_per_peer``/``recv_bytes_per_peer``
    ({"peer": bytes} or None). Times are the stored server times, or with ``host_times`` the host's
    as reported (stored − ``clock_offset_ns``): the ingest format, which a re-import turns back
    into exactly the stored times."""
    n = len(cols)
    idx = np.arange(n) if order is None else order
    opt = {k: getattr(cols, k) for k in ("step", "layer", "seq", "bytes_sent", "bytes_recv")}
    lists = {k: [None if v == NONE else v for v in a[idx].tolist()] for k, a in opt.items()}
    times = {k: getattr(cols, k)[idx] for k in ("start_ns", "end_ns")}  # (copies: indexed)
    if host_times:
        offset = cols.clock_offset_ns[idx]
        for t in times.values():
            np.subtract(t, offset, out=t)  # in place, on the indexed copies
    plain = {k: getattr(cols, k)[idx].tolist() for k in ("rank", "clock_offset_ns")}
    plain |= {k: t.tolist() for k, t in times.items()}
    phase = _PHASES_A[cols.phase[idx]].tolist()
    source = _SOURCES_A[cols.source[idx]].tolist()
    time_kind = _TIME_KINDS_A[cols.time_kind[idx]].tolist()
    peer_maps = {}
    for kind in ("send", "recv"):
        counts = getattr(cols, f"{kind}_n")
        ends = np.cumsum(np.maximum(counts, 0))
        peer_maps[kind] = (counts.tolist(), (ends - np.maximum(counts, 0)).tolist())
    peers_l = {k: getattr(cols, k).tolist() for k in PEER_COLUMNS}
    for j, i in enumerate(idx.tolist()):
        maps: dict[str, dict[str, int] | None] = {}
        for kind in ("send", "recv"):
            count, start = peer_maps[kind][0][i], peer_maps[kind][1][i]
            if count < 0:
                maps[kind] = None
            else:
                p, b = peers_l[f"{kind}_peer"], peers_l[f"{kind}_bytes"]
                maps[kind] = {str(p[k]): b[k] for k in range(start, start + count)}
        if not maps["send"] and not maps["recv"]:
            maps = {"send": None, "recv": None}  # as before: no per-peer data at all reads as None
        pg_ranks = cols.pg_ranks[i]
        yield {
            "event_id": cols.event_id[i],
            "rank": plain["rank"][j],
            "host": cols.host[i],
            "step": lists["step"][j],
            "layer": lists["layer"][j],
            "phase": phase[j],
            "collective": cols.collective[i],
            "pg": cols.pg[i],
            "pg_ranks": [int(r) for r in pg_ranks.split(",")] if pg_ranks else None,
            "seq": lists["seq"][j],
            "start_ns": plain["start_ns"][j],
            "end_ns": plain["end_ns"][j],
            "clock_offset_ns": plain["clock_offset_ns"][j],
            "bytes_sent": lists["bytes_sent"][j],
            "bytes_recv": lists["bytes_recv"][j],
            "source": source[j],
            "time_kind": time_kind[j],
            "send_bytes_per_peer": maps["send"],
            "recv_bytes_per_peer": maps["recv"],
        }
