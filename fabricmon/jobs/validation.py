"""Validate one phase-event line of an NDJSON batch into a row, or name what is wrong with it.

Pure Python on purpose (no ORM on the hot path): a batch of 1,000 lines must validate in a few
milliseconds. Every rejection names the line, the field and the reason; valid lines beside it
are kept.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from collectors.traces.schema import PEER_LISTS, PHASES, SOURCES, TIME_KINDS

_PHASES = frozenset(PHASES)
_SOURCES = frozenset(SOURCES)
_TIME_KINDS = frozenset(TIME_KINDS)
MAX_ID_LEN = 80
# 2000-01-01 .. 2200-01-01 in ns: catches µs or s sent where ns are expected.
_MIN_NS, _MAX_NS = 946_684_800 * 10**9, 7_258_118_400 * 10**9
INT64_MAX = 2**63 - 1  # every stored integer is an int64 column
MAX_LAYER = 2**31 - 1  # but layer: an int32 column of the matrices and block keys
MAX_OFFSET_NS = 10**18  # ±31 years: any real clock offset, and start/end + offset still fit int64


@dataclass(frozen=True)
class LineError:
    """Why one line of a batch was rejected (1-based line number)."""

    line: int
    field: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.line, "field": self.field, "reason": self.reason}


def brief(value: Any) -> str:
    """A value for an error message: scalars shown (cut to 60 characters), anything else by its
    type only — the repr of a hostile 10,000-deep list is a RecursionError, and of a long one a
    message as big as the request."""
    if value is None or isinstance(value, bool | int | float | str):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    kinds = {dict: "object", list: "list"}
    return f"a JSON {kinds.get(type(value), type(value).__name__)}"


class _FieldError(Exception):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field, self.reason = field, reason


def _int(obj: dict[str, Any], key: str, *, required: bool = False, minimum: int | None = None) -> int | None:
    value = obj.get(key)
    if value is None:
        if required:
            raise _FieldError(key, "required")
        return None
    if type(value) is not int:  # bool is an int subclass: reject it too
        raise _FieldError(key, f"must be an integer, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise _FieldError(key, f"must be >= {minimum}, got {value}")
    if not -INT64_MAX <= value <= INT64_MAX:
        raise _FieldError(key, f"{value} is out of the 64-bit integer range")
    return value


def _str(obj: dict[str, Any], key: str, default: str = "", max_len: int = 200) -> str:
    value = obj.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise _FieldError(key, f"must be a string, got {type(value).__name__}")
    if len(value) > max_len:
        raise _FieldError(key, f"longer than {max_len} characters")
    return value


def rank_bound_text(max_rank: int) -> str:
    return f"ranks are 0..{max_rank - 1}: the run's world_size, or FABRICMON_MAX_RANKS if it declares none"


def _peer_map(obj: dict[str, Any], key: str, max_rank: int = INT64_MAX) -> dict[str, int] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _FieldError(key, f"must be an object {{global rank: bytes}}, got {type(value).__name__}")
    # builtins over the whole map first (fast path); name the offending peer only when it fails
    values = value.values()
    if (
        all(map(str.isdigit, value))
        and "".join(value).isascii()  # str.isdigit is true for "²" and "٣" too
        and max(map(len, value), default=0) <= 18  # any 18-digit rank fits int64
        and all(type(v) is int for v in values)
        and (not value or (min(values) >= 0 and max(values) <= INT64_MAX))
        and (not value or max(map(int, value)) < max_rank)
    ):
        return value
    for peer, nbytes in value.items():
        if not (peer.isascii() and peer.isdigit()):
            raise _FieldError(key, f"peer key {brief(peer)} is not a global rank")
        if type(nbytes) is not int or nbytes < 0:
            raise _FieldError(
                key, f"bytes for peer {brief(peer)} must be a non-negative integer, got {brief(nbytes)}"
            )
        if nbytes > INT64_MAX or len(peer) > 19 or int(peer) > INT64_MAX:
            raise _FieldError(key, f"peer {brief(peer)}: out of the 64-bit integer range")
        if int(peer) >= max_rank:
            raise _FieldError(key, f"peer {peer} is not a rank of this run ({rank_bound_text(max_rank)})")
    return value


def expand_aligned(obj: dict[str, Any], max_rank: int = INT64_MAX) -> None:
    """Replace each per-pg-rank list of ``obj`` by the peer map it stands for (in place, so
    whatever reads the maps afterwards reads them), or raise ``_FieldError`` naming the problem.
    (At 256 peers the maps' keys were half the numbers a line carried and most of its bytes.)"""
    for key, map_key in PEER_LISTS:
        values = obj.pop(key, None)
        if values is None:
            continue
        if obj.get(map_key) is not None:
            raise _FieldError(key, f"give {map_key} or {key}, not both")
        if type(values) is not list:
            raise _FieldError(key, f"must be a list of bytes, one per entry of pg_ranks, "
                                   f"got {type(values).__name__}")
        ranks = _aligned_ranks(obj, key, len(values), max_rank)
        for i, v in enumerate(values):
            if type(v) is not int or not 0 <= v <= INT64_MAX:
                raise _FieldError(key, f"entry {i} (rank {ranks[i]}) must be a non-negative 64-bit "
                                       f"integer, got {brief(v)}")
        obj[map_key] = dict(zip(map(str, ranks), values, strict=True))


def _aligned_ranks(obj: dict[str, Any], key: str, n: int, max_rank: int) -> list[int]:
    """``pg_ranks`` as the ranks a per-pg-rank list of ``n`` entries is for."""
    ranks = obj.get("pg_ranks")
    if type(ranks) is not list:
        raise _FieldError(key, "needs pg_ranks: the global rank each entry is for")
    if not all(type(r) is int and 0 <= r <= INT64_MAX for r in ranks):
        raise _FieldError("pg_ranks", "must be a list of non-negative integers (group rank → global rank)")
    if n != len(ranks):
        raise _FieldError(key, f"has {n} entries, pg_ranks {len(ranks)}: one per entry of pg_ranks")
    if len(set(ranks)) != n:
        twice = next(r for i, r in enumerate(ranks) if r in ranks[:i])
        raise _FieldError("pg_ranks", f"names rank {twice} twice, so {key} cannot say whose each entry is")
    if ranks and max(ranks) >= max_rank:
        raise _FieldError("pg_ranks", f"rank {max(ranks)} is not a rank of this run "
                                      f"({rank_bound_text(max_rank)})")
    return ranks


def _total(obj: dict[str, Any], key: str, peers: dict[str, int] | None, peers_key: str) -> int | None:
    total = _int(obj, key, minimum=0)
    if peers is not None:
        peer_sum = sum(peers.values())
        if peer_sum > INT64_MAX:
            raise _FieldError(peers_key, f"bytes sum to {peer_sum}, out of the 64-bit integer range")
        if total is None:
            return peer_sum
        if total != peer_sum:
            # (not named by peers_key: the bytes may have come as the per-pg-rank list)
            raise _FieldError(key, f"{total} differs from the sum of the per-peer bytes ({peer_sum})")
    return total


def _layer(obj: dict[str, Any]) -> int | None:
    layer = _int(obj, "layer", minimum=0)
    if layer is not None and layer > MAX_LAYER:
        raise _FieldError("layer", f"must be at most {MAX_LAYER}, got {layer}")
    return layer


def event_id_for(obj: dict[str, Any]) -> str:
    """A deterministic id for a line that brought none, so a retried batch stays idempotent."""
    key = orjson.dumps(
        [
            obj.get(k)
            for k in ("rank", "source", "collective", "pg", "seq", "start_ns", "phase", "layer", "step")
        ]
    )
    return "h" + hashlib.blake2b(key, digest_size=16).hexdigest()


def _nonneg_int_or_none(v: Any) -> bool:
    return v is None or (type(v) is int and 0 <= v <= INT64_MAX)


def _fast_row(obj: Any, clock_offset_ns: int, max_rank: int = INT64_MAX) -> tuple[Any, ...] | None:
    """The common, fully valid line in one pass of cheap checks; None sends the line to the
    careful path below, which names the problem (both give the same row for a valid line)."""
    if type(obj) is not dict:
        return None
    g = obj.get
    event_id, rank, start_ns, end_ns = g("id"), g("rank"), g("start_ns"), g("end_ns")
    phase, source, time_kind = g("phase", "other"), g("source", "api"), g("time_kind", "host_call")
    send, recv, pg_ranks = g("send_bytes_per_peer"), g("recv_bytes_per_peer"), g("pg_ranks")
    step, layer, seq, offset = g("step"), g("layer"), g("seq"), g("clock_offset_ns")
    collective, pg, host = g("collective", "unknown"), g("pg", ""), g("host", "")
    if not (
        type(event_id) is str
        and 0 < len(event_id) <= MAX_ID_LEN
        and type(rank) is int
        and 0 <= rank < max_rank
        and type(start_ns) is int
        and type(end_ns) is int
        and _MIN_NS <= start_ns <= end_ns < _MAX_NS
        and type(phase) is str  # a list or object is unhashable: `in` a set would raise
        and phase in _PHASES
        and type(source) is str
        and source in _SOURCES
        and type(time_kind) is str
        and time_kind in _TIME_KINDS
        and _nonneg_int_or_none(step)
        and (layer is None or (type(layer) is int and 0 <= layer <= MAX_LAYER))
        and _nonneg_int_or_none(seq)
        and (offset is None or (type(offset) is int and -MAX_OFFSET_NS <= offset <= MAX_OFFSET_NS))
        and type(collective) is str
        and 0 < len(collective) <= 40
        and type(pg) is str
        and len(pg) <= 64
        and type(host) is str
        and len(host) <= 200
        and "bytes_sent" not in obj
        and "bytes_recv" not in obj
        and type(send) is dict
        and type(recv) is dict
        and (
            pg_ranks is None
            or (type(pg_ranks) is list and all(type(r) is int and 0 <= r <= INT64_MAX for r in pg_ranks))
        )
    ):
        return None
    sv, rv = send.values(), recv.values()
    if not (
        send
        and recv
        and all(map(str.isdigit, send))
        and all(map(str.isdigit, recv))
        and "".join(send).isascii()
        and "".join(recv).isascii()
        and all(type(v) is int for v in sv)
        and all(type(v) is int for v in rv)
        and min(sv) >= 0
        and min(rv) >= 0
        and sum(sv) <= INT64_MAX
        and sum(rv) <= INT64_MAX
        and max(map(len, send)) <= 18  # before int(): a 5,000-digit key is a ValueError there
        and max(map(len, recv)) <= 18
        and max(map(int, send)) < max_rank
        and max(map(int, recv)) < max_rank
    ):
        return None
    if offset is None:
        offset = clock_offset_ns
    return (
        event_id,
        rank,
        step,
        layer,
        phase,
        collective,
        pg,
        "" if pg_ranks is None else ",".join(map(str, pg_ranks)),
        seq,
        start_ns + offset,
        end_ns + offset,
        offset,
        sum(sv),
        sum(rv),
        orjson.dumps({"send": send, "recv": recv}).decode(),
        source,
        time_kind,
        host,
    )


def validate_event(obj: Any, clock_offset_ns: int = 0, max_rank: int = INT64_MAX) -> tuple[Any, ...]:
    """One decoded line → a row tuple in ``ROW_FIELDS`` order (raises ``_FieldError``); ranks
    (the event's and its peers') must be below ``max_rank``. A per-pg-rank list is replaced by
    its peer map in ``obj`` (``expand_aligned``)."""
    if type(obj) is dict and ("send_bytes_per_pg_rank" in obj or "recv_bytes_per_pg_rank" in obj):
        expand_aligned(obj, max_rank)
    row = _fast_row(obj, clock_offset_ns, max_rank)
    if row is not None:
        return row
    return _careful_row(obj, clock_offset_ns, max_rank)


def _choice(obj: dict[str, Any], key: str, default: str, names: tuple[str, ...]) -> str:
    value = obj.get(key, default)
    if type(value) is not str or value not in names:
        what = key.replace("_", " ")
        raise _FieldError(key, f"unknown {what} {brief(value)}; expected one of {', '.join(names)}")
    return value


def _careful_row(obj: Any, clock_offset_ns: int = 0, max_rank: int = INT64_MAX) -> tuple[Any, ...]:
    if not isinstance(obj, dict):
        raise _FieldError("", f"line must be a JSON object, got {type(obj).__name__}")
    event_id = obj.get("id")
    if event_id is None:
        event_id = event_id_for(obj)
    elif not isinstance(event_id, str) or not event_id or len(event_id) > MAX_ID_LEN:
        raise _FieldError("id", f"must be a non-empty string of at most {MAX_ID_LEN} characters")
    rank = _int(obj, "rank", required=True, minimum=0)
    assert rank is not None
    if rank >= max_rank:
        raise _FieldError("rank", f"{rank} is not a rank of this run ({rank_bound_text(max_rank)})")
    phase = _choice(obj, "phase", "other", PHASES)
    source = _choice(obj, "source", "api", SOURCES)
    time_kind = _choice(obj, "time_kind", "host_call", TIME_KINDS)
    start_ns = _int(obj, "start_ns", required=True)
    end_ns = _int(obj, "end_ns", required=True)
    assert start_ns is not None and end_ns is not None
    if not _MIN_NS <= start_ns < _MAX_NS:
        raise _FieldError("start_ns", f"{start_ns} is not a Unix-epoch time in nanoseconds")
    if end_ns < start_ns:
        raise _FieldError("end_ns", f"ends before it starts ({end_ns} < {start_ns})")
    if end_ns >= _MAX_NS:
        raise _FieldError("end_ns", f"{end_ns} is not a Unix-epoch time in nanoseconds")
    send = _peer_map(obj, "send_bytes_per_peer", max_rank)
    recv = _peer_map(obj, "recv_bytes_per_peer", max_rank)
    bytes_sent = _total(obj, "bytes_sent", send, "send_bytes_per_peer")
    bytes_recv = _total(obj, "bytes_recv", recv, "recv_bytes_per_peer")
    pg_ranks = obj.get("pg_ranks")
    if pg_ranks is None:
        pg_ranks_text = ""
    elif isinstance(pg_ranks, list) and all(type(r) is int and 0 <= r <= INT64_MAX for r in pg_ranks):
        pg_ranks_text = ",".join(map(str, pg_ranks))
    else:
        raise _FieldError("pg_ranks", "must be a list of non-negative integers (group rank → global rank)")
    offset = _int(obj, "clock_offset_ns")
    if offset is not None and not -MAX_OFFSET_NS <= offset <= MAX_OFFSET_NS:
        raise _FieldError("clock_offset_ns", f"{offset} is more than {MAX_OFFSET_NS} ns away from 0")
    offset = clock_offset_ns if offset is None else offset
    peers = orjson.dumps({"send": send, "recv": recv}).decode() if (send or recv) else ""
    return (
        event_id,
        rank,
        _int(obj, "step", minimum=0),
        _layer(obj),
        phase,
        _str(obj, "collective", "unknown", 40) or "unknown",
        _str(obj, "pg", "", 64),
        pg_ranks_text,
        _int(obj, "seq", minimum=0),
        start_ns + offset,
        end_ns + offset,
        offset,
        bytes_sent,
        bytes_recv,
        peers,
        source,
        time_kind,
        _str(obj, "host"),
    )


ROW_FIELDS = (
    "event_id",
    "rank",
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
    "peer_bytes",
    "source",
    "time_kind",
    "host",
)


@dataclass
class ParsedBatch:
    """Valid rows (with their per-peer maps for the matrices) and the rejected lines."""

    rows: list[tuple[Any, ...]]
    peers: list[tuple[dict[str, int] | None, dict[str, int] | None]]
    errors: list[LineError]
    lines: int


def parse_ndjson(body: bytes, clock_offset_ns: int = 0, max_lines: int = 100_000) -> ParsedBatch:
    """Split an NDJSON body into validated rows and per-line errors (blank lines are skipped)."""
    rows: list[tuple[Any, ...]] = []
    peers: list[tuple[dict[str, int] | None, dict[str, int] | None]] = []
    errors: list[LineError] = []
    n = 0
    for n, raw in enumerate(body.split(b"\n"), start=1):
        if not raw.strip():
            continue
        if n > max_lines:
            errors.append(LineError(n, "", f"batch longer than {max_lines} lines; the rest was not read"))
            break
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            errors.append(LineError(n, "", f"invalid JSON: {exc}"))
            continue
        try:
            row = validate_event(obj, clock_offset_ns)
        except _FieldError as bad:
            errors.append(LineError(n, bad.field, bad.reason))
            continue
        rows.append(row)
        peers.append((obj.get("send_bytes_per_peer"), obj.get("recv_bytes_per_peer")))
    return ParsedBatch(rows, peers, errors, n)


def validate_dicts(
    events: list[dict[str, Any]], clock_offset_ns: int = 0, max_rank: int = INT64_MAX
) -> ParsedBatch:
    """The same as ``parse_ndjson`` for events already decoded (importers)."""
    rows: list[tuple[Any, ...]] = []
    peers: list[tuple[dict[str, int] | None, dict[str, int] | None]] = []
    errors: list[LineError] = []
    for n, obj in enumerate(events, start=1):
        try:
            rows.append(validate_event(obj, clock_offset_ns, max_rank))
        except _FieldError as bad:
            errors.append(LineError(n, bad.field, bad.reason))
            continue
        peers.append((obj.get("send_bytes_per_peer"), obj.get("recv_bytes_per_peer")))
    return ParsedBatch(rows, peers, errors, len(events))


def query_int(
    raw: str | None, field: str, *, minimum: int = 0, maximum: int = INT64_MAX, empty_ok: bool = True
) -> int | None:
    """An integer from a query string, form field or header: ASCII digits only (``str.isdigit`` is
    true for "²", which ``int`` refuses), within [minimum, maximum]; None when absent (or empty,
    unless ``empty_ok`` is false: the API's own parameters are integers when given)."""
    if raw is None or (raw == "" and empty_ok):
        return None
    text = raw.strip()
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 19:
        raise InputError(field, f"must be an integer, got {brief(raw)}")
    value = int(text)
    if not minimum <= value <= maximum:
        raise InputError(field, f"must be from {minimum} to {maximum}, got {value}")
    return value


class InputError(ValueError):
    """Bad input from a caller: ``field`` names what is wrong (shown in the 4xx answer)."""

    status = 400

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field, self.reason = field, reason


class UnprocessableError(InputError):
    """Well-formed input naming something the server does not hold (a fabric not in the topology,
    a run without one): 422, not 400 — the request was valid, the state refuses it."""

    status = 422
