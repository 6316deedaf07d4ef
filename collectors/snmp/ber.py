"""A minimal BER codec for SNMP v1/v2c messages and the PDUs inside SNMPv3 ones (``usm.py``):
exactly what a table poller sends and reads.

Why not pyasn1: building a pyasn1 object tree per varbind is ~85 % of the pysnmp poller's CPU
(reference/telemetry.md §1.7). Here a response is read in place, with every length checked::

    30 L  02 01 ver  04 L community  A2 L  02 L reqid  02 L errStatus  02 L errIndex  30 L
          30 L  06 L <oid bytes>  <tag> L <value>        one varbind, repeated

:class:`ColumnDecoder` is the hot path: each varbind's OID is compared *as encoded bytes* with the
pre-encoded column prefix (a byte prefix of whole sub-identifiers is an OID prefix), the ifIndex is
the one sub-identifier left, and the value goes straight into an ``array`` of that column; no OID
tuple and no value object is built. Anything that is not well-formed BER of the expected shape
raises ``SnmpPollError('malformed', what and at which byte)`` and nothing else.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from collectors.snmp.errors import SnmpPollError

GET, GETNEXT, RESPONSE, GETBULK, REPORT = 0xA0, 0xA1, 0xA2, 0xA5, 0xA8
SEQUENCE, INTEGER, OCTET_STRING, NULL, OBJECT_ID = 0x30, 0x02, 0x04, 0x05, 0x06
IP_ADDRESS, COUNTER32, GAUGE32, TIMETICKS, OPAQUE, COUNTER64 = 0x40, 0x41, 0x42, 0x43, 0x44, 0x46
NO_SUCH_OBJECT, NO_SUCH_INSTANCE, END_OF_MIB_VIEW = 0x80, 0x81, 0x82
EXCEPTIONS = frozenset({NO_SUCH_OBJECT, NO_SUCH_INSTANCE, END_OF_MIB_VIEW})

# The tag each polled column kind must carry (Gauge32 and Unsigned32 share 0x42).
KIND_TAGS = {"counter64": COUNTER64, "counter32": COUNTER32, "gauge32": GAUGE32, "integer": INTEGER,
             "timeticks": TIMETICKS}  # fmt: skip
_UNSIGNED_MAX = {COUNTER32: 2**32 - 1, GAUGE32: 2**32 - 1, TIMETICKS: 2**32 - 1, COUNTER64: 2**64 - 1}
_BYTES_TAGS = frozenset({OCTET_STRING, IP_ADDRESS, OPAQUE})
VALUE_TAGS = frozenset({INTEGER, NULL, OBJECT_ID, *_UNSIGNED_MAX, *_BYTES_TAGS, *EXCEPTIONS})
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

Value = int | bytes | tuple[int, ...] | None


def malformed(what: str, pos: int) -> SnmpPollError:
    return SnmpPollError("malformed", f"{what} at byte {pos}")


# --- encoding (requests; also used by tests) -----------------------------------------------------


def encode_length(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((0x80 | len(body),)) + body


def tlv(tag: int, content: bytes) -> bytes:
    return bytes((tag,)) + encode_length(len(content)) + content


def encode_int(tag: int, value: int) -> bytes:
    """Minimal two's-complement INTEGER-like TLV (unsigned types get their leading 0x00)."""
    return tlv(tag, value.to_bytes(value.bit_length() // 8 + 1, "big", signed=True))


def encode_oid(oid: Sequence[int]) -> bytes:
    """The content octets of an OBJECT IDENTIFIER (first two arcs combined, base-128)."""
    if len(oid) < 2 or oid[0] > 2 or (oid[0] < 2 and oid[1] > 39) or min(oid) < 0:
        raise ValueError(f"not an encodable OID: {oid}")
    out = bytearray()
    for sub in (oid[0] * 40 + oid[1], *oid[2:]):
        chunk, rest = [sub & 0x7F], sub >> 7
        while rest:
            chunk.append(0x80 | (rest & 0x7F))
            rest >>= 7
        out += bytes(reversed(chunk))
    return bytes(out)


def _null_varbind(oid: bytes) -> bytes:
    """SEQUENCE { OID, NULL }; the short-length form directly (every request builds ~10 of these,
    a few % of the shard process's CPU through :func:`tlv`)."""
    n = len(oid)
    if n < 124:
        return bytes((SEQUENCE, n + 4, OBJECT_ID, n)) + oid + b"\x05\x00"
    return tlv(SEQUENCE, tlv(OBJECT_ID, oid) + b"\x05\x00")


def encode_pdu(
    pdu: int, *, request_id: int, oids: Sequence[bytes], non_repeaters: int = 0, max_repetitions: int = 0
) -> bytes:
    """A GET/GETNEXT/GETBULK PDU asking for ``oids`` (encoded OID contents). For GET/GETNEXT the
    two GETBULK fields sit where error-status/error-index go, and must stay 0."""
    varbinds = b"".join(map(_null_varbind, oids))
    body = encode_int(INTEGER, request_id) + encode_int(INTEGER, non_repeaters)
    body += encode_int(INTEGER, max_repetitions)
    body += tlv(SEQUENCE, varbinds)
    return tlv(pdu, body)


def encode_request(
    version: int, community: bytes, pdu: int, *, request_id: int, oids: Sequence[bytes],
    non_repeaters: int = 0, max_repetitions: int = 0,
) -> bytes:  # fmt: skip
    """A v1/v2c message around :func:`encode_pdu` (SNMPv3 wraps the PDU in ``usm``)."""
    body = encode_pdu(pdu, request_id=request_id, oids=oids, non_repeaters=non_repeaters,
                      max_repetitions=max_repetitions)  # fmt: skip
    return tlv(SEQUENCE, encode_int(INTEGER, version) + tlv(OCTET_STRING, community) + body)


# --- generic decoding ----------------------------------------------------------------------------


def read_tlv(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the TLV at ``pos``, which must fit before ``end``."""
    if pos + 2 > end:
        raise malformed("truncated TLV header", pos)
    tag, n = data[pos], data[pos + 1]
    start = pos + 2
    if n >= 0x80:
        k = n & 0x7F
        if k == 0 or k > 3:
            raise malformed(f"unsupported length form 0x{n:02x}", pos + 1)
        if start + k > end:
            raise malformed("truncated length", pos + 1)
        n = int.from_bytes(data[start : start + k], "big")
        start += k
    if start + n > end:
        raise malformed(f"length {n} runs past the end ({end - start} bytes left) of tag 0x{tag:02x}", pos)
    return tag, start, start + n


def _signed(data: bytes, start: int, stop: int, pos: int) -> int:
    if stop == start:
        raise malformed("empty INTEGER", pos)
    if stop - start > 9:
        raise malformed("INTEGER longer than 9 bytes", pos)
    return int.from_bytes(data[start:stop], "big", signed=True)


def read_integer(data: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    tag, s, e = read_tlv(data, pos, end)
    if tag != INTEGER:
        raise malformed(f"{what} has tag 0x{tag:02x}, not INTEGER", pos)
    return _signed(data, s, e, pos), e


def decode_oid(content: bytes, pos: int = 0) -> tuple[int, ...]:
    """OID content octets → tuple; malformed if empty, non-minimal or cut mid sub-identifier."""
    if not content:
        raise malformed("empty OBJECT IDENTIFIER", pos)
    subs: list[int] = []
    value, fresh = 0, True
    for k, byte in enumerate(content):
        if fresh and byte == 0x80:
            raise malformed("non-minimal OID sub-identifier", pos + k)
        value = (value << 7) | (byte & 0x7F)
        fresh = not byte & 0x80
        if fresh:
            subs.append(value)
            value = 0
    if not fresh:
        raise malformed("OID ends inside a sub-identifier", pos + len(content) - 1)
    first = subs[0]
    head = (0, first) if first < 40 else (1, first - 40) if first < 80 else (2, first - 80)
    return (*head, *subs[1:])


@dataclass(frozen=True, slots=True)
class ResponseHeader:
    """The fields of a v1/v2c message around its varbind list (positions index the datagram; for
    v3 the decrypted scoped PDU, with ``community`` empty)."""

    version: int
    community: bytes
    pdu: int
    request_id: int
    error_status: int
    error_index: int
    vb_start: int
    vb_end: int


def parse_header(data: bytes) -> ResponseHeader:
    """Check the message frame (every length must close exactly) and read its header fields."""
    end = len(data)
    tag, s, e = read_tlv(data, 0, end)
    if tag != SEQUENCE:
        raise malformed(f"message tag 0x{tag:02x} is not SEQUENCE", 0)
    if e != end:
        raise malformed(f"{end - e} trailing byte(s) after the message", e)
    version, pos = read_integer(data, s, e, "version")
    tag, cs, ce = read_tlv(data, pos, e)
    if tag != OCTET_STRING:
        raise malformed(f"community has tag 0x{tag:02x}", pos)
    return parse_pdu(data, ce, e, version=version, community=data[cs:ce])


def parse_pdu(data: bytes, pos: int, end: int, *, version: int, community: bytes) -> ResponseHeader:
    """The PDU at ``pos``, which must end exactly at ``end`` (v1/v2c: the message's end; v3: the
    scoped PDU's), and its fields; the caller gives what the message around it said."""
    pdu, ps, pe = read_tlv(data, pos, end)
    if pe != end:
        raise malformed("PDU does not end with the message", pe)
    request_id, pos = read_integer(data, ps, pe, "request-id")
    error_status, pos = read_integer(data, pos, pe, "error-status")
    error_index, pos = read_integer(data, pos, pe, "error-index")
    tag, vs, ve = read_tlv(data, pos, pe)
    if tag != SEQUENCE:
        raise malformed(f"varbind list has tag 0x{tag:02x}", pos)
    if ve != pe:
        raise malformed("varbind list does not end with the PDU", ve)
    return ResponseHeader(version, community, pdu, request_id, error_status, error_index, vs, ve)


def read_value(data: bytes, tag: int, s: int, e: int, pos: int) -> Value:
    """One varbind value as int (numbers), bytes (strings), tuple (OID) or None (NULL/exceptions)."""
    if tag == INTEGER:
        v = _signed(data, s, e, pos)
        if not INT32_MIN <= v <= INT32_MAX:
            raise malformed(f"INTEGER {v} out of Integer32 range", pos)
        return v
    top = _UNSIGNED_MAX.get(tag)
    if top is not None:
        v = _signed(data, s, e, pos)
        if not 0 <= v <= top:
            raise malformed(f"value {v} out of range for tag 0x{tag:02x}", pos)
        return v
    if tag in _BYTES_TAGS:
        if tag == IP_ADDRESS and e - s != 4:
            raise malformed("IpAddress is not 4 bytes", pos)
        return data[s:e]
    if tag == OBJECT_ID:
        return decode_oid(data[s:e], s)
    if tag == NULL or tag in EXCEPTIONS:
        if e != s:
            raise malformed(f"tag 0x{tag:02x} must be empty", pos)
        return None
    raise malformed(f"unknown value tag 0x{tag:02x}", pos)


def iter_varbinds(data: bytes, start: int, end: int) -> list[tuple[bytes, int, Value]]:
    """Every varbind of ``data[start:end]`` as (encoded OID, value tag, value): the general path
    (sysUpTime, tests); tables go through :class:`ColumnDecoder`."""
    out: list[tuple[bytes, int, Value]] = []
    pos = start
    while pos < end:
        tag, bs, be = read_tlv(data, pos, end)
        if tag != SEQUENCE:
            raise malformed(f"varbind has tag 0x{tag:02x}", pos)
        tag, os_, oe = read_tlv(data, bs, be)
        if tag != OBJECT_ID:
            raise malformed(f"varbind name has tag 0x{tag:02x}", bs)
        oid = data[os_:oe]
        decode_oid(oid, os_)  # validate
        vtag, vs, ve = read_tlv(data, oe, be)
        if ve != be:
            raise malformed("varbind has bytes after its value", ve)
        out.append((oid, vtag, read_value(data, vtag, vs, ve, oe)))
        pos = be
    return out


# --- the hot path: many columns of one table -----------------------------------------------------


class ColumnDecoder:
    """One multi-column walk, read straight from response datagrams into per-column arrays.

    ``cursor[i]`` is the encoded OID to ask next for column ``i``; ``index[i]``/``values[i]`` hold
    the good cells (ifIndex, value as uint64). A cell of the wrong type, a negative INTEGER or an
    index of more than one sub-identifier is a bad cell (counted, its row later dropped).
    """

    __slots__ = ("_last", "_prefix_lens", "bad_cells", "cursor", "index", "prefixes", "tags", "values")

    def __init__(self, prefixes: Sequence[Sequence[int]], kinds: Sequence[str]) -> None:
        self.prefixes = [encode_oid(p) for p in prefixes]
        self._prefix_lens = [len(p) for p in self.prefixes]
        self.tags = [KIND_TAGS[k] for k in kinds]
        self.cursor = list(self.prefixes)
        # The cursor's tail after the prefix: an int ifIndex (-1 = the prefix itself) or, for a
        # cell whose index is several sub-identifiers, the tuple of them.
        self._last: list[int | tuple[int, ...]] = [-1] * len(self.prefixes)
        self.index = [array("q") for _ in self.prefixes]
        self.values = [array("Q") for _ in self.prefixes]
        self.bad_cells = 0

    def absorb(
        self, data: bytes, pos: int, end: int, active: Sequence[int]
    ) -> tuple[int, set[int], set[int]]:
        """Read the row-major varbinds of one GETBULK response for the ``active`` columns.

        Returns (varbinds read, columns that advanced, columns that left their prefix or ended).
        """
        n = len(active)
        prefixes, plens, tags, last = self.prefixes, self._prefix_lens, self.tags, self._last
        idx_add = [a.append for a in self.index]
        val_add = [a.append for a in self.values]
        at: dict[int, tuple[int, int]] = {}  # column → (start, stop) of its newest OID here
        done: set[int] = set()
        j = count = 0
        while pos < end:
            # varbind SEQUENCE (short or 1-2 byte long length)
            if data[pos] != SEQUENCE:
                raise malformed(f"varbind has tag 0x{data[pos]:02x}", pos)
            p, ln = pos + 2, data[pos + 1] if pos + 1 < end else -1
            if ln >= 0x80 or ln < 0:
                _t, p, vb_end = read_tlv(data, pos, end)
            else:
                vb_end = p + ln
                if vb_end > end:
                    raise malformed("varbind runs past the varbind list", pos)
            if p + 2 > vb_end or data[p] != OBJECT_ID:
                raise malformed("varbind name is not an OBJECT IDENTIFIER", p)
            os_ = p + 2
            oe = os_ + data[p + 1]
            if data[p + 1] >= 0x80 or oe + 2 > vb_end:
                _t, os_, oe = read_tlv(data, p, vb_end)
                if oe + 2 > vb_end:
                    raise malformed("varbind has no value", oe)
            if oe == os_ or data[oe - 1] & 0x80:
                raise malformed("OID empty or cut inside a sub-identifier", os_)
            tag, vs = data[oe], oe + 2
            ve = vs + data[oe + 1]
            if data[oe + 1] >= 0x80:
                _t, vs, ve = read_tlv(data, oe, vb_end)
            if ve != vb_end:
                raise malformed("value length does not close the varbind", oe)
            if tag not in VALUE_TAGS:
                raise malformed(f"unknown value tag 0x{tag:02x}", oe)
            i = active[j]
            j = j + 1 if j + 1 < n else 0
            count += 1
            pos = vb_end
            if i in done:
                continue
            if tag in EXCEPTIONS:
                if ve != vs:
                    raise malformed(f"exception tag 0x{tag:02x} must be empty", oe)
                done.add(i)
                continue
            q = os_ + plens[i]
            if oe < q or not data.startswith(prefixes[i], os_, q):
                done.add(i)  # the walk left this column (agent moved on to the next one)
                continue
            # ifIndex < 128 is one byte, < 16384 two (the first with bit 7 set, never 0x80).
            tail: int | tuple[int, ...]
            if q + 1 == oe:
                tail = data[q]
            elif q + 2 == oe and data[q] > 0x80:
                tail = ((data[q] & 0x7F) << 7) | data[q + 1]
            else:
                tail = _tail(data, q, oe)
            prev = last[i]
            behind = tail <= prev if type(tail) is int and type(prev) is int else _not_after(tail, prev)
            if behind:
                raise malformed(f"OID not increasing in {_dotted(prefixes[i])}: {_dotted(data[os_:oe])}", os_)
            last[i] = tail
            at[i] = (os_, oe)
            if tag != tags[i] or type(tail) is not int:  # (a tuple: an index of several parts)
                self.bad_cells += 1
                if tag in _UNSIGNED_MAX or tag == INTEGER:
                    read_value(data, tag, vs, ve, oe)  # still malformed if badly encoded
                continue
            if ve == vs or ve - vs > 9 or data[vs] & 0x80:
                if tag != INTEGER or ve == vs or ve - vs > 9:
                    raise malformed(f"bad encoding of a tag 0x{tag:02x} value", oe)
                self.bad_cells += 1  # a negative INTEGER (oper status): no such state
                continue
            value = int.from_bytes(data[vs:ve], "big")
            if value > _UNSIGNED_MAX.get(tag, INT32_MAX):
                raise malformed(f"value {value} out of range for tag 0x{tag:02x}", oe)
            idx_add[i](tail)
            val_add[i](value)
        for i, (s, e) in at.items():
            self.cursor[i] = data[s:e]
        return count, set(at), done


def _tail(data: bytes, start: int, stop: int) -> int | tuple[int, ...]:
    """The sub-identifiers after a column prefix: an int if exactly one, else their tuple
    (empty: the OID is the prefix itself, which never comes after the cursor)."""
    subs: list[int] = []
    value, fresh = 0, True
    for k in range(start, stop):
        byte = data[k]
        if fresh and byte == 0x80:
            raise malformed("non-minimal OID sub-identifier", k)
        value = (value << 7) | (byte & 0x7F)
        fresh = not byte & 0x80
        if fresh:
            subs.append(value)
            value = 0
    return subs[0] if len(subs) == 1 else tuple(subs)


def _not_after(tail: int | tuple[int, ...], prev: int | tuple[int, ...]) -> bool:
    a = (tail,) if isinstance(tail, int) else tail
    b = () if prev == -1 else (prev,) if isinstance(prev, int) else prev
    return a <= b


def _dotted(oid: bytes) -> str:
    try:
        return ".".join(map(str, decode_oid(oid)))
    except SnmpPollError:
        return oid.hex()
