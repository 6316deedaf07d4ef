"""Pure units of the SNMPv3 USM (collectors/snmp/usm.py): key localization against the RFC's own
test vectors, and a message of ours checked, decrypted and refused when tampered with."""

from __future__ import annotations

import hashlib

import pytest
from pyasn1.type.univ import OctetString
from pysnmp.proto.secmod.rfc3414 import localkey

from collectors.snmp import usm
from collectors.snmp.ber import GETBULK, REPORT, RESPONSE, encode_oid, encode_pdu, parse_pdu
from collectors.snmp.errors import SnmpPollError
from fabricmon.core.topology.spec import SnmpSettings

ENGINE = bytes.fromhex("000000000000000000000002")  # RFC 3414 §A.3


def test_rfc3414_a3_1_md5_key_localization() -> None:
    ku = usm.password_to_key(b"maplesyrup", "MD5")
    assert ku.hex() == "9faf3283884e92834ebc9847d8edd963"
    assert usm.localize_key(ku, ENGINE, "MD5").hex() == "526f5eed9fcce26f8964c2930787d82b"


def test_rfc3414_a3_2_sha_key_localization() -> None:
    ku = usm.password_to_key(b"maplesyrup", "SHA")
    assert ku.hex() == "9fb5cc0381497b3793528939ff788d5d79145211"
    assert usm.localize_key(ku, ENGINE, "SHA").hex() == "6695febc9288e36282235fc7151f128497b38f3f"


@pytest.mark.parametrize(("auth", "hash_func"), [("SHA256", hashlib.sha256), ("SHA512", hashlib.sha512)])
def test_sha2_localization_matches_pysnmp(auth: str, hash_func: object) -> None:
    """RFC 7860 has no vectors of its own: the same algorithm as pysnmp's over SHA-2."""
    ku = usm.password_to_key(b"authpass123", auth)
    assert ku == bytes(localkey.hash_passphrase(b"authpass123", hash_func))
    assert usm.localize_key(ku, ENGINE, auth) == bytes(localkey.localize_key(ku, OctetString(ENGINE), hash_func))


def session(**kw: str) -> usm.UsmSession:
    s = usm.UsmSession.from_settings(SnmpSettings(
        version="3", v3_user="fm", v3_auth_protocol=kw.get("auth", "SHA-256"),
        v3_auth_key=kw.get("auth_key", "authpass123"),
        v3_priv_protocol="AES", v3_priv_key=kw.get("priv_key", "privpass123")))  # fmt: skip
    s.learn(ENGINE, 7, 1000)
    s._salt = 0  # deterministic ciphertext: the test reads the same bytes every run
    return s


def response_from_agent(agent: usm.UsmSession, msg_id: int) -> bytes:
    """What an agent with the same keys sends back: our encoder builds it (a Response PDU)."""
    pdu = bytearray(encode_pdu(GETBULK, request_id=msg_id, oids=[encode_oid((1, 3, 6, 1, 2, 1, 1, 3, 0))]))
    pdu[0] = RESPONSE
    return agent.request(msg_id, bytes(pdu))


def test_an_authpriv_message_round_trips_and_its_pdu_reads_like_v2c() -> None:
    ours = session()
    data = response_from_agent(session(), 4242)
    assert usm.is_v3(data) and usm.msg_id_of(data) == 4242
    plain, header = ours.open(data, "sw")
    assert header.pdu == RESPONSE and header.request_id == 4242 and header.version == 3
    assert parse_pdu(plain, plain.index(bytes((RESPONSE,))), len(plain), version=3, community=b"") == header


@pytest.mark.parametrize("flip_at", [-1, -40])  # in the encrypted PDU, in the security parameters
def test_a_tampered_message_fails_its_hmac(flip_at: int) -> None:
    data = bytearray(response_from_agent(session(), 9))
    data[flip_at] ^= 0x01
    with pytest.raises(SnmpPollError) as err:
        session().open(bytes(data), "sw")
    assert err.value.kind in ("auth", "malformed")


def test_other_keys_are_refused_with_what_is_wrong() -> None:
    with pytest.raises(SnmpPollError, match="fails HMAC-SHA256") as err:
        session().open(response_from_agent(session(auth_key="otherauth99"), 1), "sw")
    assert err.value.kind == "auth"
    with pytest.raises(SnmpPollError, match="wrong length") as err:
        session().open(response_from_agent(session(auth="SHA"), 1), "sw")
    assert err.value.kind == "auth"
    with pytest.raises(SnmpPollError, match="wrong priv key") as err:
        session().open(response_from_agent(session(priv_key="otherpriv99"), 1), "sw")
    assert err.value.kind == "auth"


def test_v2c_datagrams_are_not_v3() -> None:
    v2c = bytes.fromhex("302602010104067075626c6963a2190204000000070201000201003009300706032b0601050000")
    assert not usm.is_v3(v2c) and usm.msg_id_of(v2c) is None


@pytest.mark.parametrize(("auth", "priv", "ok"), [
    ("SHA-256", "AES", True), ("SHA", "AES128", True), ("MD5", "NONE", True), ("SHA512", "AES", True),
    ("SHA", "DES", False), ("SHA256", "AES256", False), ("NONE", "AES", False),
])  # fmt: skip
def test_the_fast_path_takes_only_what_it_speaks(auth: str, priv: str, ok: bool) -> None:
    settings = SnmpSettings(version="3", v3_user="fm", v3_auth_protocol=auth, v3_auth_key="authpass123",
                            v3_priv_protocol=priv, v3_priv_key="privpass123")  # fmt: skip
    assert usm.fast_path_supports(settings) is ok


def agent_message(pdu_tag: int, oid: tuple[int, ...], *, boots: int, engine_time: int) -> bytes:
    agent = session()
    agent.learn(ENGINE, boots, engine_time)
    pdu = bytearray(encode_pdu(GETBULK, request_id=5, oids=[encode_oid(oid)]))
    pdu[0] = pdu_tag
    return agent.request(5, bytes(pdu))


def test_an_authentic_not_in_time_window_report_resyncs_boots_and_time() -> None:
    ours = session()  # boots 7, time 1000
    data = agent_message(REPORT, (1, 3, 6, 1, 6, 3, 15, 1, 1, 2, 0), boots=8, engine_time=3)
    plain, header = ours.open(data, "sw")
    assert header.pdu == REPORT and usm.report_name(plain, header) == "notInTimeWindow"
    assert ours.boots == 8 and abs(ours.engine_time() - 3) <= 1


def test_a_response_from_an_earlier_boot_or_outside_the_window_is_refused() -> None:
    for boots, engine_time in ((6, 1000), (7, 1000 - usm.TIME_WINDOW_S - 10)):
        data = agent_message(RESPONSE, (1, 3, 6, 1, 2, 1, 1, 3, 0), boots=boots, engine_time=engine_time)
        with pytest.raises(SnmpPollError, match="time window") as err:
            session().open(data, "sw")
        assert err.value.kind == "auth"


def test_a_response_below_the_requested_security_level_is_refused() -> None:
    agent = usm.UsmSession.from_settings(SnmpSettings(
        version="3", v3_user="fm", v3_auth_protocol="SHA-256", v3_auth_key="authpass123",
        v3_priv_protocol="NONE"))  # fmt: skip
    agent.learn(ENGINE, 7, 1000)
    with pytest.raises(SnmpPollError, match="below the security level") as err:
        session().open(response_from_agent(agent, 3), "sw")  # authentic, but in clear
    assert err.value.kind == "auth"
