"""The fast v2c codec against pysnmp's own encoder (pyasn1 encodes, we decode, both must agree),
and against garbage: random bytes, every truncation and byte flips of valid messages must give
``SnmpPollError('malformed')`` or a clean decode — never another exception."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyasn1.codec.ber import decoder, encoder
from pysnmp.proto import api, rfc1905

from collectors.snmp.ber import (
    GETBULK,
    ColumnDecoder,
    decode_oid,
    encode_oid,
    encode_request,
    iter_varbinds,
    parse_header,
    read_tlv,
)
from collectors.snmp.errors import SnmpPollError

V1 = api.PROTOCOL_MODULES[api.SNMP_VERSION_1]
V2C = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
IFX = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1)
IFT = (1, 3, 6, 1, 2, 1, 2, 2, 1)
KIND_CLASS = {"counter64": V2C.Counter64, "counter32": V2C.Counter32, "gauge32": V2C.Gauge32,
              "integer": V2C.Integer, "timeticks": V2C.TimeTicks}  # fmt: skip
KIND_MAX = {"counter64": 2**64 - 1, "counter32": 2**32 - 1, "gauge32": 2**32 - 1,
            "integer": 2**31 - 1, "timeticks": 2**32 - 1}  # fmt: skip
COLUMNS = [((*IFX, 6), "counter64"), ((*IFX, 15), "gauge32"), ((*IFX, 19), "timeticks"),
           ((*IFT, 8), "integer"), ((*IFT, 13), "counter32")]  # fmt: skip

oids = st.tuples(st.integers(0, 2), st.integers(0, 39)).flatmap(
    lambda head: st.lists(st.integers(0, 2**32 - 1), max_size=12).map(lambda rest: (*head, *rest))
)
values = st.one_of(
    st.integers(-(2**31), 2**31 - 1).map(lambda v: (V2C.Integer(v), v)),
    st.integers(0, 2**32 - 1).map(lambda v: (V2C.Counter32(v), v)),
    st.integers(0, 2**32 - 1).map(lambda v: (V2C.Gauge32(v), v)),
    st.integers(0, 2**32 - 1).map(lambda v: (V2C.TimeTicks(v), v)),
    st.integers(0, 2**64 - 1).map(lambda v: (V2C.Counter64(v), v)),
    st.binary(max_size=300).map(lambda b: (V2C.OctetString(b), b)),
    st.binary(min_size=4, max_size=4).map(lambda b: (V2C.IpAddress(b), b)),
    oids.map(lambda o: (V2C.ObjectIdentifier(o), o)),
    st.just((V2C.Null(""), None)),
    st.sampled_from([rfc1905.noSuchObject, rfc1905.noSuchInstance, rfc1905.endOfMibView]).map(
        lambda v: (v, None)
    ),
)


def response(varbinds: list[tuple[tuple[int, ...], Any]], *, request_id: int = 7,
             community: bytes = b"public", mod: Any = V2C, error_status: int = 0) -> bytes:  # fmt: skip
    """A GetResponse message encoded by pysnmp/pyasn1."""
    pdu = mod.GetResponsePDU()
    mod.apiPDU.set_defaults(pdu)
    mod.apiPDU.set_request_id(pdu, request_id)
    mod.apiPDU.set_error_status(pdu, error_status)
    mod.apiPDU.set_varbinds(pdu, varbinds)
    msg = mod.Message()
    mod.apiMessage.set_defaults(msg)
    mod.apiMessage.set_community(msg, community)
    mod.apiMessage.set_pdu(msg, pdu)
    return bytes(encoder.encode(msg))


@given(oids)
def test_oid_encoding_matches_pyasn1(oid: tuple[int, ...]) -> None:
    encoded = bytes(encoder.encode(V2C.ObjectIdentifier(oid)))
    _tag, start, stop = read_tlv(encoded, 0, len(encoded))
    assert encoded[start:stop] == encode_oid(oid)
    assert decode_oid(encode_oid(oid)) == oid


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(oids, values), max_size=20),
    st.integers(-(2**31), 2**31 - 1),
    st.binary(max_size=40),
    st.integers(0, 18),
)
def test_generic_decode_round_trips_pysnmp_responses(
    vbs: list[tuple[tuple[int, ...], tuple[Any, Any]]], request_id: int, community: bytes, status: int
) -> None:
    data = response([(o, v) for o, (v, _) in vbs], request_id=request_id, community=community,
                    error_status=status)  # fmt: skip
    h = parse_header(data)
    assert (h.version, h.community, h.pdu, h.request_id, h.error_status) == (
        1, community, 0xA2, request_id, status,
    )  # fmt: skip
    got = iter_varbinds(data, h.vb_start, h.vb_end)
    assert [decode_oid(o) for o, _t, _v in got] == [o for o, _ in vbs]
    assert [v for _o, _t, v in got] == [plain for _, (_, plain) in vbs]


def test_v1_messages_parse_too() -> None:
    data = response([((1, 3, 6, 1, 2, 1, 1, 3, 0), V1.TimeTicks(42))], mod=V1, community=b"c1")
    h = parse_header(data)
    assert (h.version, h.community) == (0, b"c1")
    assert iter_varbinds(data, h.vb_start, h.vb_end)[0][2] == 42


@given(
    st.integers(1, 2**31 - 1), st.integers(0, 5), st.integers(0, 200), st.lists(oids, min_size=1, max_size=12)
)
def test_our_getbulk_is_what_pysnmp_decodes(
    request_id: int, non_rep: int, max_rep: int, asked: list[Any]
) -> None:
    data = encode_request(1, b"public", GETBULK, request_id=request_id, non_repeaters=non_rep,
                          max_repetitions=max_rep, oids=[encode_oid(o) for o in asked])  # fmt: skip
    msg, rest = decoder.decode(data, asn1Spec=V2C.Message())
    assert rest == b""
    pdu = V2C.apiMessage.get_pdu(msg)
    assert int(V2C.apiBulkPDU.get_request_id(pdu)) == request_id
    assert int(V2C.apiBulkPDU.get_non_repeaters(pdu)) == non_rep
    assert int(V2C.apiBulkPDU.get_max_repetitions(pdu)) == max_rep
    assert [tuple(o) for o, _ in V2C.apiBulkPDU.get_varbinds(pdu)] == asked


# --- the column decoder ---------------------------------------------------------------------------

cell = st.tuples(st.booleans(), st.integers(0, 2**64 - 1))  # (right type?, raw value)
tables = st.tuples(
    st.lists(st.integers(1, 2**31 - 1), min_size=1, max_size=30, unique=True).map(sorted),
    st.lists(st.integers(0, 30), min_size=len(COLUMNS), max_size=len(COLUMNS)),  # rows per column
    st.data(),
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(tables)
def test_column_decoder_reads_a_pysnmp_encoded_getbulk_answer(table: Any) -> None:
    ports, wanted, data_ = table
    lengths = [min(n, len(ports)) for n in wanted]
    expect: list[list[tuple[int, int]]] = []
    bad = 0
    cells: list[list[tuple[tuple[int, ...], Any]]] = []
    for (prefix, kind), n in zip(COLUMNS, lengths, strict=True):
        col, good = [], []
        for ifindex in ports[:n]:
            right, raw = data_.draw(cell)
            value = raw % (KIND_MAX[kind] + 1)
            if right:
                col.append(((*prefix, ifindex), KIND_CLASS[kind](value)))
                good.append((ifindex, value))
            else:  # a string where a number belongs: a bad cell, never a crash
                col.append(((*prefix, ifindex), V2C.OctetString(b"x")))
                bad += 1
        cells.append(col)
        expect.append(good)
    rows = max(lengths) + 1
    varbinds = []
    for r in range(rows):  # row-major, as an agent answers GETBULK; past a column's end: endOfMibView
        for c, (prefix, _kind) in enumerate(COLUMNS):
            varbinds.append(cells[c][r] if r < len(cells[c]) else ((*prefix, 2**31), rfc1905.endOfMibView))
    data = response(varbinds)
    h = parse_header(data)
    dec = ColumnDecoder([p for p, _ in COLUMNS], [k for _, k in COLUMNS])
    count, moved, done = dec.absorb(data, h.vb_start, h.vb_end, list(range(len(COLUMNS))))
    assert count == len(varbinds)
    assert done == set(range(len(COLUMNS)))
    assert moved == {c for c, n in enumerate(lengths) if n}
    assert dec.bad_cells == bad
    for c, good in enumerate(expect):
        assert list(zip(dec.index[c], dec.values[c], strict=True)) == good
        if lengths[c]:
            assert decode_oid(dec.cursor[c]) == (*COLUMNS[c][0], ports[lengths[c] - 1])


def test_column_decoder_edge_cells() -> None:
    prefix = (*IFX, 6)
    dec = ColumnDecoder([prefix, (*IFT, 8)], ["counter64", "integer"])
    data = response([
        ((*prefix, 1), V2C.Counter64(2**64 - 1)), ((*IFT, 8, 1), V2C.Integer(-3)),     # negative status
        ((*prefix, 2, 5), V2C.Counter64(1)), ((*IFT, 8, 300), V2C.Integer(1)),          # 2-part index
        ((*prefix, 200000), V2C.Counter64(0)), ((*IFT, 9, 1), V2C.Integer(1)),          # left the column
    ])  # fmt: skip
    h = parse_header(data)
    _count, moved, done = dec.absorb(data, h.vb_start, h.vb_end, [0, 1])
    assert (moved, done) == ({0, 1}, {1})
    assert list(dec.index[0]) == [1, 200000] and list(dec.values[0]) == [2**64 - 1, 0]
    assert list(dec.index[1]) == [300] and dec.bad_cells == 2


@pytest.mark.parametrize(
    ("varbinds", "what"),
    [
        ([(((*IFX, 6, 5)), V2C.Counter64(1)), ((*IFX, 6, 5), V2C.Counter64(2))], "not increasing"),
        ([(((*IFX, 6, 5)), V2C.Counter64(1)), ((*IFX, 6, 4, 9), V2C.Counter64(2))], "not increasing"),
        ([(((*IFX, 6)), V2C.Counter64(1))], "not increasing"),
    ],
)
def test_non_increasing_oids_are_malformed(varbinds: list[Any], what: str) -> None:
    data = response(varbinds)
    h = parse_header(data)
    with pytest.raises(SnmpPollError, match=what) as err:
        ColumnDecoder([(*IFX, 6)], ["counter64"]).absorb(data, h.vb_start, h.vb_end, [0])
    assert err.value.kind == "malformed"


# --- garbage ---------------------------------------------------------------------------------------


def decode_everything(data: bytes) -> None:
    """Every decoder entry point over ``data``; only SnmpPollError may come out."""
    h = parse_header(data)
    iter_varbinds(data, h.vb_start, h.vb_end)
    dec = ColumnDecoder([p for p, _ in COLUMNS], [k for _, k in COLUMNS])
    dec.absorb(data, h.vb_start, h.vb_end, list(range(len(COLUMNS))))


def _valid_table_response() -> bytes:
    return response([
        ((1, 3, 6, 1, 2, 1, 1, 3, 0), V2C.TimeTicks(12345)),
        ((*IFX, 6, 1), V2C.Counter64(2**63)), ((*IFX, 15, 1), V2C.Gauge32(400000)),
        ((*IFX, 19, 1), V2C.TimeTicks(0)), ((*IFT, 8, 1), V2C.Integer(1)),
        ((*IFT, 13, 1), V2C.Counter32(7)),
    ] + [((*IFX, 6, 1000 + k), V2C.OctetString(b"x" * (k * 40))) for k in range(4)])  # fmt: skip


def test_every_truncation_of_a_valid_message_is_malformed() -> None:
    data = _valid_table_response()
    decode_everything(data)
    for k in range(len(data)):
        with pytest.raises(SnmpPollError) as err:
            decode_everything(data[:k])
        assert err.value.kind == "malformed"


@settings(max_examples=400)
@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_but_snmp_poll_error(blob: bytes) -> None:
    try:
        decode_everything(blob)
    except SnmpPollError as exc:
        assert exc.kind == "malformed"


@settings(max_examples=400)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6))
def test_byte_flips_of_a_valid_message_never_raise_anything_else(flips: list[tuple[int, int]]) -> None:
    data = bytearray(_valid_table_response())
    for pos, byte in flips:
        data[pos % len(data)] = byte
    try:
        decode_everything(bytes(data))
    except SnmpPollError as exc:
        assert exc.kind == "malformed"


@given(st.binary(max_size=64), st.integers(0, 2**31 - 1))
def test_inner_length_lies_are_caught(junk: bytes, n: int) -> None:
    """A varbind list whose varbind claims more (or fewer) bytes than it has."""
    vb = b"\x30" + bytes([min(n, 0x7F)]) + junk
    body = b"\x02\x01\x07\x02\x01\x00\x02\x01\x00\x30" + bytes([len(vb)]) + vb
    pdu = b"\xa2" + bytes([len(body)]) + body
    msg = b"\x02\x01\x01\x04\x06public" + pdu
    try:
        decode_everything(b"\x30" + bytes([len(msg)]) + msg if len(msg) < 128 else b"")
    except SnmpPollError as exc:
        assert exc.kind == "malformed"


def test_ifindex_at_every_encoding_width_boundary() -> None:
    """1-, 2-, 3- and 5-byte sub-identifiers: the fast paths and the general one agree."""
    ports = [1, 127, 128, 129, 255, 256, 16383, 16384, 2**21 - 1, 2**21, 2**31 - 1]
    data = response([((*IFX, 6, p), V2C.Counter64(p * 3)) for p in ports])
    h = parse_header(data)
    dec = ColumnDecoder([(*IFX, 6)], ["counter64"])
    dec.absorb(data, h.vb_start, h.vb_end, [0])
    assert list(dec.index[0]) == ports and list(dec.values[0]) == [p * 3 for p in ports]
    assert dec.bad_cells == 0


@pytest.mark.parametrize("n_subids", [1, 60, 121, 122, 123, 200])  # around the 1-byte length limit
def test_request_varbinds_of_long_oids_are_what_pysnmp_decodes(n_subids: int) -> None:
    oid = (1, 3, *([5] * n_subids))
    msg, _rest = decoder.decode(encode_request(1, b"public", GETBULK, request_id=3, oids=[encode_oid(oid)],
                                               max_repetitions=2), asn1Spec=V2C.Message())  # fmt: skip
    (vb,) = V2C.apiBulkPDU.get_varbinds(V2C.apiMessage.get_pdu(msg))
    assert tuple(vb[0]) == oid
