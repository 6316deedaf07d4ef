"""NDJSON batch → ``EventColumns`` fast: msgspec decodes each line into a typed struct in C (types,
ranges, vocabularies checked there), the per-peer maps stay raw JSON and are parsed for the whole
batch at once with numpy, and the cross-field rules (end ≥ start, totals = sum of peers) are
checked on columns.

Any line this path does not accept goes to the careful validator (``validation``), which names
the line, field and reason — or accepts it (e.g. unusual but valid formatting). So the fast path
may only ever be *stricter* than the careful one; ``tests/jobs`` checks both give equal rows.
"""

from __future__ import annotations

from itertools import compress
from operator import attrgetter
from typing import Annotated, Any, Literal

import msgspec
import numpy as np
import orjson
from msgspec.structs import astuple

from collectors.traces.schema import PHASES, SOURCES, TIME_KINDS
from fabricmon.jobs import ndjson_aligned as aligned
from fabricmon.jobs.columns import (
    NONE,
    PHASE_CODE,
    SOURCE_CODE,
    TIME_KIND_CODE,
    EventColumns,
    columns_from_rows,
    concat,
)
from fabricmon.jobs.validation import (
    _MAX_NS,
    _MIN_NS,
    INT64_MAX,
    MAX_ID_LEN,
    MAX_LAYER,
    MAX_OFFSET_NS,
    LineError,
    _FieldError,
    validate_event,
)

_NonNeg = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
_Ns = Annotated[int, msgspec.Meta(ge=_MIN_NS, lt=_MAX_NS)]


_RAW_NULL = msgspec.Raw(b"null")


class _Line(msgspec.Struct, gc=False):
    """One event line as the fast path accepts it (unknown keys are ignored, as before)."""

    rank: _NonNeg
    start_ns: _Ns
    end_ns: _Ns
    id: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_LEN)] | None = None
    step: _NonNeg | None = None
    layer: Annotated[int, msgspec.Meta(ge=0, le=MAX_LAYER)] | None = None
    seq: _NonNeg | None = None
    phase: Literal[PHASES] = "other"  # type: ignore[valid-type]
    source: Literal[SOURCES] = "api"  # type: ignore[valid-type]
    time_kind: Literal[TIME_KINDS] = "host_call"  # type: ignore[valid-type]
    collective: Annotated[str, msgspec.Meta(max_length=40)] | None = None
    pg: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    host: Annotated[str, msgspec.Meta(max_length=200)] | None = None
    clock_offset_ns: Annotated[int, msgspec.Meta(ge=-MAX_OFFSET_NS, le=MAX_OFFSET_NS)] | None = None
    bytes_sent: _NonNeg | None = None
    bytes_recv: _NonNeg | None = None
    # raw JSON text, parsed per batch below (msgspec would build a dict per map: the slow part);
    # absent reads as null, as a JSON null does, so every value is text (no None to replace)
    pg_ranks: msgspec.Raw = _RAW_NULL
    send_bytes_per_peer: msgspec.Raw = _RAW_NULL
    recv_bytes_per_peer: msgspec.Raw = _RAW_NULL
    # the maps' compact form: lists aligned with pg_ranks (ndjson_aligned)
    send_bytes_per_pg_rank: msgspec.Raw = _RAW_NULL
    recv_bytes_per_pg_rank: msgspec.Raw = _RAW_NULL


_DECODER = msgspec.json.Decoder(_Line)
_BATCH_DECODER = msgspec.json.Decoder(list[_Line])
_NULL = b"null"
_DIGITS = b"0123456789"
# msgspec raises RecursionError past ~1,000 levels of nesting (a hostile peer map); orjson stops at
# 1,024 with a JSONDecodeError, so the careful path names the line
_DECODE_ERRORS = (msgspec.ValidationError, msgspec.DecodeError, RecursionError)


def _skeleton(k: int, spaced: bool) -> bytes:
    """A peer map of k entries with its digits removed: {"":,"":} (orjson) or {"": , "": } (json)."""
    if k == 0:
        return b"{}"
    return b"{" + (b'"": , ' if spaced else b'"":,') * (k - 1) + (b'"": }' if spaced else b'"":}')


_COMPACT = [*(_skeleton(k, False) for k in range(1025)), b"null"]  # [-1]: an absent map


# a peer map with its quotes, braces and blanks deleted and its colons made commas: the numbers
# of a batch's maps joined by "," read as one comma-separated list (numpy's text reader, in C)
_COLON_TO_COMMA = bytes(44 if c == ord(":") else c for c in range(256))
_NOT_NUMBERS = b'{"} \t\n\r'  # (bytes.translate deletes these before it maps the rest)
# the same for the batch's maps back to back: each map's "}" ends its last number instead
_END_TO_COMMA = bytes(44 if c in (ord(":"), ord("}")) else c for c in range(256))
_NOT_NUMBERS_BUT_ENDS = b'{" \t\n\r'
_BIG = 10**18  # values from here up go to the careful path (the text reader saturates at int64)


def _peer_columns(
    raws: list[Any], max_rank: int = INT64_MAX
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Raw JSON peer maps (JSON null = absent) → (counts, ok, peers, bytes): counts[i] is -1 for an
    absent map; ok[i] false sends line i to the careful path (anything but plain
    {"digits": digits} maps with distinct keys below ``max_rank`` and values below 10**18);
    peers/bytes are flat for the ok maps, in order. The maps' shape is checked on the batch's
    bytes at once (digits removed, what is left must be the compact or json.dumps skeleton of as
    many entries as the map has colons), then all their numbers are read in one C call."""
    n = len(raws)
    texts = raws
    joined, bounds, a = _joined(texts)
    first = a[bounds[:-1]]
    not_object = (first != ord("{")) & (first != ord("n"))  # a list, number, string… (n: null)
    if not_object.any():
        texts = [_NULL if bad else t for t, bad in zip(texts, not_object.tolist(), strict=True)]
        joined, bounds, a = _joined(texts)
    is_null = a[bounds[:-1]] == ord("n")
    # entries per map = its colons (true for every map the skeleton check below accepts)
    k = np.add.reduceat(a == ord(":"), bounds[:-1], dtype=np.int64)  # (no map text is empty)
    k_list, null_list = k.tolist(), is_null.tolist()
    map_ok = ~not_object
    skel = joined.translate(None, _DIGITS)
    if not (
        max(k_list) < len(_COMPACT) - 1  # the last entry of _COMPACT is "null" (index -1)
        and skel == b"".join(map(_COMPACT.__getitem__, np.where(is_null, -1, k).tolist()))
    ):  # not one compact batch: check map by map (json.dumps spacing is fine too)
        for j, text in enumerate(texts):
            s = bytes(text).translate(None, _DIGITS)
            if not (null_list[j] or s in (_skeleton(k_list[j], False), _skeleton(k_list[j], True))):
                map_ok[j] = False
    has = map_ok & ~is_null & (k > 0)
    numbers = _numbers(texts, has, k, joined)  # (an empty key or value is an empty field: not read)
    if numbers is None:
        map_ok[has] = False
        numbers = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(n, dtype=bool)
    peers, nbytes, read = numbers
    map_ok &= read | ~has
    has = read
    if len(peers):
        owner = np.repeat(np.flatnonzero(has), k[has])
        big = (peers >= min(_BIG, max_rank)) | (nbytes >= _BIG)
        # a repeated key: JSON keeps its last value, so the careful path decides (maps are
        # usually in rank order: one comparison; otherwise a sort finds the repeats)
        rising = peers[1:] > peers[:-1]
        new_map = owner[1:] != owner[:-1]
        bad = owner[big]
        if not (rising | new_map).all():
            order = np.lexsort((peers, owner))
            same = (peers[order][1:] == peers[order][:-1]) & (owner[order][1:] == owner[order][:-1])
            bad = np.concatenate([bad, owner[order][1:][same]])
        if len(bad):
            map_ok[bad] = False
            keep = map_ok[owner]
            peers, nbytes = peers[keep], nbytes[keep]
    counts = np.where(is_null | ~map_ok, NONE, k)
    return counts, map_ok, peers, nbytes


def _numbers(
    texts: list[Any], has: np.ndarray, k: np.ndarray, joined: bytes | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(keys, values, read) of the maps where ``has`` is true, whose skeletons are already
    checked (so their text is digits between the structure); ``read`` is where the maps were
    read — a map with an empty field ({"": 5}) or one longer than 18 digits is left to the
    careful path. None if the text reader disagrees (then the careful path reads them all).
    ``joined``: the maps' texts back to back, read as they are when every map is to be read."""
    for _ in range(2):  # the second pass only without the maps the first found a bad field in
        if not has.any():
            return np.zeros(0, np.int64), np.zeros(0, np.int64), has
        if joined is not None and has.all():
            numbers = joined.translate(_END_TO_COMMA, _NOT_NUMBERS_BUT_ENDS)[:-1]
        else:
            numbers = b",".join(compress(texts, has.tolist())).translate(_COLON_TO_COMMA, _NOT_NUMBERS)
        b = np.frombuffer(numbers, dtype=np.uint8)
        comma = b == ord(",")
        if not (np.less(b - ord("0"), 10) | comma).all():  # (uint8: "-" and the rest wrap high)
            return None
        fields = np.diff(np.flatnonzero(comma), prepend=-1, append=len(b)) - 1  # digits per field
        per_map = 2 * k[has]
        if len(fields) != int(per_map.sum()):
            return None
        bad = (fields < 1) | (fields > 18)  # empty, or possibly beyond int64
        if bad.any():
            has = has.copy()
            has[np.repeat(np.flatnonzero(has), per_map)[bad]] = False
            continue
        # every field is now [0-9]{1,18}: the text reader reads it all, so it never warns (no
        # warnings filter here: that state is process-global and would leak into other threads)
        values = np.fromstring(numbers, dtype=np.int64, sep=",")
        if len(values) != len(fields):
            return None
        return values[0::2], values[1::2], has
    return None


def _joined(texts: list[Any]) -> tuple[bytes, np.ndarray, np.ndarray]:
    joined = b"".join(texts)
    bounds = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)), out=bounds[1:])
    return joined, bounds, np.frombuffer(joined, dtype=np.uint8)


def _sums(counts: np.ndarray, nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-event sums of the flat bytes, and whether each sum surely fits int64."""
    c = np.maximum(counts, 0)
    nonempty = c > 0
    if not nonempty.any():
        return np.zeros(len(c), dtype=np.int64), np.ones(len(c), dtype=bool)
    starts = (np.cumsum(c) - c)[nonempty]
    if int(nbytes.max()) * int(c.max()) < INT64_MAX:  # the usual batch: no sum can overflow
        sums = np.zeros(len(c), dtype=np.int64)
        sums[nonempty] = np.add.reduceat(nbytes, starts)
        return sums, np.ones(len(c), dtype=bool)
    owner = np.repeat(np.arange(len(c)), c)
    approx = np.bincount(owner, weights=nbytes.astype(np.float64), minlength=len(c))
    sums = np.zeros(len(c), dtype=np.int64)
    fits = approx < 4e18
    safe = np.where(fits[owner], nbytes, 0)  # a possibly overflowing sum is recomputed carefully
    sums[nonempty] = np.add.reduceat(safe, starts)
    return sums, fits


def _or(values: tuple[Any, ...], default: str) -> list[str]:
    """None and "" → default (as the careful path does), without a pass when none is falsy."""
    return list(values) if all(values) else [v or default for v in values]


def _opt(values: tuple[Any, ...]) -> np.ndarray:
    if None not in values:
        return np.array(values, dtype=np.int64)
    if values.count(None) == len(values):
        return np.full(len(values), NONE, dtype=np.int64)
    return np.array([NONE if v is None else v for v in values], dtype=np.int64)


def _fast_columns(
    structs: list[_Line], clock_offset_ns: int, max_rank: int = INT64_MAX
) -> tuple[EventColumns, np.ndarray]:
    """Columns for the decoded structs, and a mask of the ones that passed every rule."""
    # one transpose in C (astuple + zip) instead of a Python pass per field
    fields_t = zip(*map(astuple, structs), strict=True)
    g: dict[str, Any] = dict(zip(_Line.__struct_fields__, fields_t, strict=True))
    n = len(structs)
    maps = [*g["send_bytes_per_peer"], *g["recv_bytes_per_peer"]]
    lists: list[bytes] = []
    from_list = np.zeros(2 * n, dtype=bool)
    send_l, recv_l = g["send_bytes_per_pg_rank"], g["recv_bytes_per_pg_rank"]
    # (an absent field is the default object itself: one C-level count for the usual batch)
    if send_l.count(_RAW_NULL) + recv_l.count(_RAW_NULL) != 2 * n:
        lists = [*map(bytes, send_l), *map(bytes, recv_l)]
        from_list = np.fromiter((t != _NULL for t in lists), dtype=bool, count=2 * n)
    if from_list.any():  # a line's list stands for its map (a line giving both: the careful path)
        both = from_list & np.fromiter((bytes(t) != _NULL for t in maps), dtype=bool, count=2 * n)
        maps = [_RAW_NULL if f else t for t, f in zip(maps, from_list.tolist(), strict=True)]
    # both kinds of map in one pass (the per-call work is a third of it at 8 peers); the send
    # maps come first, so the flat arrays split where the send maps' entries end
    counts, maps_ok, peer, nbytes = _peer_columns(maps, max_rank)
    split = int(np.maximum(counts[:n], 0).sum())
    send = counts[:n], peer[:split], nbytes[:split]
    recv = counts[n:], peer[split:], nbytes[split:]
    if from_list.any():
        (send, recv), lists_ok = _with_lists(g, lists, from_list, (send, recv), max_rank)
        maps_ok &= lists_ok & ~both
    (send_n, send_peer, send_bytes), (recv_n, recv_peer, recv_bytes) = send, recv
    rank = np.array(g["rank"], dtype=np.int64)
    ok = maps_ok[:n] & maps_ok[n:] & (rank < max_rank)  # out of the run's ranks: the careful path names it
    start, end = np.array(g["start_ns"], dtype=np.int64), np.array(g["end_ns"], dtype=np.int64)
    ok &= end >= start
    offsets = g["clock_offset_ns"]
    if offsets.count(None) == n:  # the usual batch: the request's offset for every line
        off = np.full(n, clock_offset_ns, dtype=np.int64)
    else:
        off = np.array([clock_offset_ns if v is None else v for v in offsets], dtype=np.int64)
    totals = {}
    for counts, nbytes, key in (
        (send_n, send_bytes, "bytes_sent"),
        (recv_n, recv_bytes, "bytes_recv"),
    ):
        # the flat arrays only hold ok maps: spread them over all events for the sums
        sums, fits = _sums(np.where(counts >= 0, counts, NONE), nbytes)
        given = _opt(g[key])
        has_map = counts >= 0
        ok &= fits & ~(has_map & (given != NONE) & (given != sums))
        totals[key] = np.where(has_map, sums, given)
    raw_pg = list(map(bytes, g["pg_ranks"]))
    pg_text = {raw: _pg_ranks_text(raw) for raw in set(raw_pg)}  # few distinct groups per batch
    pg_ranks = list(map(pg_text.__getitem__, raw_pg))
    if None in pg_text.values():
        ok &= np.array([t is not None for t in pg_ranks], dtype=bool)
    if None in g["id"]:  # no id: the careful path derives one from the content
        ok &= np.array([i is not None for i in g["id"]], dtype=bool)
    cols = EventColumns(
        event_id=list(g["id"]),
        rank=rank,
        step=_opt(g["step"]),
        layer=_opt(g["layer"]),
        seq=_opt(g["seq"]),
        phase=np.fromiter(map(PHASE_CODE.__getitem__, g["phase"]), dtype=np.int64, count=n),
        source=np.fromiter(map(SOURCE_CODE.__getitem__, g["source"]), dtype=np.int64, count=n),
        time_kind=np.fromiter(map(TIME_KIND_CODE.__getitem__, g["time_kind"]), dtype=np.int64, count=n),
        start_ns=start + off,
        end_ns=end + off,
        clock_offset_ns=off,
        bytes_sent=totals["bytes_sent"],
        bytes_recv=totals["bytes_recv"],
        send_n=send_n,
        recv_n=recv_n,
        send_peer=send_peer,
        send_bytes=send_bytes,
        recv_peer=recv_peer,
        recv_bytes=recv_bytes,
        collective=_or(g["collective"], "unknown"),
        pg=_or(g["pg"], ""),
        pg_ranks=_or(pg_ranks, ""),
        host=_or(g["host"], ""),
    )
    assert len(cols) == n
    return cols, ok


_Flat = tuple[np.ndarray, np.ndarray, np.ndarray]  # one direction's (counts, peers, bytes)


def _with_lists(
    g: dict[str, Any], lists: list[bytes], from_list: np.ndarray, flat: tuple[_Flat, _Flat], max_rank: int
) -> tuple[tuple[_Flat, _Flat], np.ndarray]:
    """Both directions with the lines' per-pg-rank lists read in (``ndjson_aligned``), and where
    the lists were read (both directions, send first)."""
    n = len(g["rank"])
    raw_pg = list(map(bytes, g["pg_ranks"]))
    ranks = {raw: aligned.group_ranks(raw) for raw in set(raw_pg)}  # few distinct groups a batch
    groups = [ranks[raw] for raw in raw_pg]
    counts, ok, peers, values = aligned.aligned_columns(lists, groups * 2, max_rank)
    split = int(np.maximum(counts[:n], 0).sum())
    out = (
        aligned.merged(n, flat[0], (counts[:n], peers[:split], values[:split]), from_list[:n] & ok[:n]),
        aligned.merged(n, flat[1], (counts[n:], peers[split:], values[split:]), from_list[n:] & ok[n:]),
    )
    return out, ok


def _pg_ranks_text(raw: bytes) -> str | None:
    """'0,1,2' for a JSON list of non-negative int64s, '' for null, None when invalid."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if value is None:
        return ""
    if isinstance(value, list) and all(type(r) is int and 0 <= r <= INT64_MAX for r in value):
        return ",".join(map(str, value))
    return None


def parse_ndjson_columns(
    body: bytes, clock_offset_ns: int = 0, max_lines: int = 100_000, max_rank: int = INT64_MAX
) -> tuple[EventColumns, list[LineError], int]:
    """An NDJSON body → (columns of the valid lines, per-line errors, lines read); every rank
    (an event's and its peers') must be below ``max_rank``."""
    decode = _DECODER.decode
    structs: list[_Line] = []
    struct_lines: list[int] = []
    slow: list[tuple[int, bytes]] = []
    errors: list[LineError] = []
    n = body.count(b"\n") + 1
    whole = body[:-1] if body.endswith(b"\n") else body  # a trailing newline ends the last line
    lines_of: list[bytes] = []
    try:  # the common batch: every line decodes, none blank, not too many
        if n - (whole is not body) > max_lines or not whole:
            raise ValueError
        # the lines as one JSON array: one call into msgspec for the batch. A line holding two
        # objects ("{…},{…}") would be two elements: the count must equal the lines'. (A blank
        # line is ",," and a bracket ends or nests the array: decode errors, so line by line.)
        structs = _BATCH_DECODER.decode(b"[" + whole.replace(b"\n", b",") + b"]")
        if len(structs) != n - (whole is not body):
            raise ValueError
        struct_lines = list(range(1, len(structs) + 1))
    except (*_DECODE_ERRORS, ValueError):
        lines_of = body.split(b"\n")
        if lines_of and not lines_of[-1]:
            lines_of.pop()
        structs, n = [], 0
        for n, raw in enumerate(lines_of, start=1):
            if not raw or raw.isspace():
                continue
            if n > max_lines:
                errors.append(LineError(n, "", f"batch longer than {max_lines} lines; the rest was not read"))
                break
            try:
                structs.append(decode(raw))
                struct_lines.append(n)
            except _DECODE_ERRORS:
                slow.append((n, raw))
        else:
            n = len(body.split(b"\n"))
    parts = []
    if structs:
        fast, ok = _fast_columns(structs, clock_offset_ns, max_rank)
        if ok.all():
            parts.append(fast)
        else:
            parts.append(fast.select(ok))
            bad = np.flatnonzero(~ok).tolist()
            lines_of = lines_of or body.split(b"\n")
            raws = dict(slow)
            slow = sorted([*raws.items(), *((struct_lines[i], lines_of[struct_lines[i] - 1]) for i in bad)])
    if slow:
        rows, peers = [], []
        for line, raw in slow:
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                errors.append(LineError(line, "", f"invalid JSON: {exc}"))
                continue
            try:
                rows.append(validate_event(obj, clock_offset_ns, max_rank))
            except _FieldError as bad_field:
                errors.append(LineError(line, bad_field.field, bad_field.reason))
                continue
            peers.append((obj.get("send_bytes_per_peer"), obj.get("recv_bytes_per_peer")))
        parts.append(columns_from_rows(rows, peers))
    errors.sort(key=attrgetter("line"))
    return concat(parts), errors, n
