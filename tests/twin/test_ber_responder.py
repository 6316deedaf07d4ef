"""The fast v1/v2c responder, held against pysnmp's own BER encoder/decoder (no sockets)."""

from __future__ import annotations

import numpy as np
import pytest
from pyasn1.codec.ber import decoder, encoder
from pysnmp.proto import api

from fabricmon.core.topology.spec import PortSpec
from twin.agent_state import SwitchAgentState
from twin.counters import METRICS
from twin.mib import build_switch_mib
from twin.snmp_v2c import BerError, Request, TableCodec, respond

IFX = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1)


@pytest.fixture
def codec() -> TableCodec:
    ports = [PortSpec(i, f"Ethernet{i}", 400_000_000_000, "host") for i in (1, 2, 3)]
    counters = np.arange(3 * len(METRICS), dtype=np.uint64).reshape(3, -1) * np.uint64(10**12)
    counters[2, 0] = np.uint64(2**64 - 1)
    state = SwitchAgentState(
        name="leaf-x", entries=build_switch_mib("leaf-x", ports, ["a", "b", "c"], len(METRICS), "test"),
        read_counters=lambda t: counters, boot_ns=0, discontinuity_ticks=[0, 0, 0],
    )
    return TableCodec(state)


def _request(version, pdu_type: str, oids, *, non_rep: int = 0, max_rep: int = 0, community: str = "public"):
    mod = api.PROTOCOL_MODULES[version]
    pdu = getattr(mod, pdu_type)()
    mod.apiPDU.set_defaults(pdu)
    mod.apiPDU.set_request_id(pdu, 4242)
    if pdu_type == "GetBulkRequestPDU":
        mod.apiBulkPDU.set_non_repeaters(pdu, non_rep)
        mod.apiBulkPDU.set_max_repetitions(pdu, max_rep)
    mod.apiPDU.set_varbinds(pdu, [(o, mod.Null("")) for o in oids])
    msg = mod.Message()
    mod.apiMessage.set_defaults(msg)
    mod.apiMessage.set_community(msg, community)
    mod.apiMessage.set_pdu(msg, pdu)
    return encoder.encode(msg)


def _answer(codec, wire: bytes, version=api.SNMP_VERSION_2C):
    out = respond(codec, Request(wire), b"public")
    assert out is not None
    mod = api.PROTOCOL_MODULES[version]
    msg, rest = decoder.decode(out, asn1Spec=mod.Message())
    assert not rest
    pdu = mod.apiMessage.get_pdu(msg)
    vbs = [(tuple(o), v) for o, v in mod.apiPDU.get_varbinds(pdu)]
    return int(mod.apiPDU.get_request_id(pdu)), int(mod.apiPDU.get_error_status(pdu)), vbs


def test_get_returns_typed_values_and_exceptions(codec):
    wire = _request(api.SNMP_VERSION_2C, "GetRequestPDU",
                    [(*IFX, 6, 3), (*IFX, 1, 2), (1, 3, 6, 1, 2, 1, 1, 3, 0), (*IFX, 6, 99), (1, 3, 6, 1, 4, 1)])
    req_id, err, vbs = _answer(codec, wire)
    assert req_id == 4242 and err == 0
    assert type(vbs[0][1]).__name__ == "Counter64" and int(vbs[0][1]) == 2**64 - 1
    assert bytes(vbs[1][1]) == b"Ethernet2"
    assert type(vbs[2][1]).__name__ == "TimeTicks"
    assert type(vbs[3][1]).__name__ == "NoSuchInstance"
    assert type(vbs[4][1]).__name__ == "NoSuchObject"


def test_getbulk_non_repeaters_repetitions_and_end_of_mib(codec):
    wire = _request(api.SNMP_VERSION_2C, "GetBulkRequestPDU",
                    [(1, 3, 6, 1, 2, 1, 1, 3), (*IFX, 6), (*IFX, 19, 2)], non_rep=1, max_rep=3)
    _req, err, vbs = _answer(codec, wire)
    assert err == 0
    assert vbs[0][0] == (1, 3, 6, 1, 2, 1, 1, 3, 0)  # non-repeater: one GETNEXT
    # Repeaters interleave row-major: (6.1, 19.3), (6.2, end), (6.3, end) — then stop.
    assert [v[0] for v in vbs[1::2]] == [(*IFX, 6, 1), (*IFX, 6, 2), (*IFX, 6, 3)]
    assert vbs[2][0] == (*IFX, 19, 3)
    assert type(vbs[4][1]).__name__ == "EndOfMibView" and type(vbs[6][1]).__name__ == "EndOfMibView"
    assert int(vbs[1][1]) == 0 and int(vbs[3][1]) == 7 * 10**12


def test_v1_getnext_past_the_end_is_no_such_name_and_set_is_refused(codec):
    wire = _request(api.SNMP_VERSION_1, "GetNextRequestPDU", [(*IFX, 19, 3)])
    _req, err, _vbs = _answer(codec, wire, api.SNMP_VERSION_1)
    assert err == 2  # noSuchName
    wire = _request(api.SNMP_VERSION_2C, "SetRequestPDU", [(1, 3, 6, 1, 2, 1, 1, 5, 0)])
    _req, err, _vbs = _answer(codec, wire)
    assert err == 17  # notWritable


def test_wrong_community_unanswered_and_garbage_rejected(codec):
    wire = _request(api.SNMP_VERSION_2C, "GetRequestPDU", [(1, 3, 6, 1, 2, 1, 1, 5, 0)], community="nope")
    assert respond(codec, Request(wire), b"public") is None
    for bad in (b"", b"\x30\x02\x02\x00", wire[:-3], b"\x30\x05\x02\x01\x03\x04\x00"):
        with pytest.raises(BerError):
            Request(bad)


def test_v1_never_sees_counter64(codec):
    wire = _request(api.SNMP_VERSION_1, "GetNextRequestPDU", [(*IFX, 1, 3)])
    _req, err, vbs = _answer(codec, wire, api.SNMP_VERSION_1)
    assert err == 0 and vbs[0][0] == (*IFX, 15, 1)  # skipped columns 6, 7, 10, 11 (Counter64)
    wire = _request(api.SNMP_VERSION_1, "GetRequestPDU", [(*IFX, 6, 1)])
    _req, err, _vbs = _answer(codec, wire, api.SNMP_VERSION_1)
    assert err == 2
