"""Deliberately broken agents on real UDP sockets: garbage, truncated BER, valid BER with
non-increasing OIDs, silence. Each gives its typed SnmpPollError; the good agent polled in the same
batch is unaffected, and the poller keeps working afterwards (reliability.md §7, G4/G8)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pyasn1.codec.ber import decoder, encoder
from pysnmp.proto import api

from collectors.snmp import (
    PARSE_ERRORS,
    IfSnapshot,
    SnmpPoller,
    SnmpPollError,
    SnmpTarget,
    close_loop_context,
)
from fabricmon.core.topology.spec import SnmpSettings

pytestmark = pytest.mark.integration

V2C = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
HC_IN_OCTETS = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 6)


def answer(mode: str, request: bytes) -> bytes | None:
    if mode == "silent":
        return None
    if mode == "garbage":
        return b"\xde\xad\xbe\xef" * 8
    if mode == "truncated":  # a SEQUENCE announcing 300 bytes, then the first few of a message
        return b"\x30\x82\x01\x2c\x02\x01\x01\x04\x06public\xa2\x82"
    message, _ = decoder.decode(request, asn1Spec=V2C.Message())
    response = V2C.apiMessage.get_response(message)
    pdu = V2C.apiMessage.get_pdu(response)
    if mode == "non_increasing":  # well-formed BER, but the walk would loop forever
        V2C.apiPDU.set_varbinds(pdu, [((*HC_IN_OCTETS, 1), V2C.Counter64(5))] * 3)
    return bytes(encoder.encode(response))


class BrokenAgent(asyncio.DatagramProtocol):
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.transport: Any = None
        self.requests = 0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.requests += 1
        reply = answer(self.mode, data)
        if reply is not None:
            self.transport.sendto(reply, addr)


async def start(mode: str) -> tuple[BrokenAgent, int]:
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(
        lambda: BrokenAgent(mode), local_addr=("127.0.0.1", 0)
    )
    return proto, transport.get_extra_info("sockname")[1]


def target(name: str, port: int) -> SnmpTarget:
    return SnmpTarget(name, "127.0.0.1", port, SnmpSettings(timeout_s=0.3, retries=0, interval_s=1.0))


def test_broken_agents_give_typed_errors_and_do_not_disturb_a_good_one(table_agent, engine) -> None:  # type: ignore[no-untyped-def]
    good, _ = table_agent(ports=16)
    before = PARSE_ERRORS["malformed_poll"]

    async def main() -> tuple[list[object], object]:
        modes = ["garbage", "truncated", "non_increasing", "silent"]
        agents = [await start(m) for m in modes]
        targets = [target(m, port) for m, (_, port) in zip(modes, agents, strict=True)]
        good_target = SnmpTarget(
            "good", "127.0.0.1", good.port, SnmpSettings(timeout_s=2.0, retries=0, interval_s=5)
        )
        poller = SnmpPoller(engine=engine)
        try:
            results = await poller.poll_many([*targets, good_target])
            again = await poller.poll(good_target)  # the engine survived the garbage
            assert all(a.requests >= 1 for a, _ in agents)
            return results, again
        finally:
            for a, _ in agents:
                a.transport.close()
            close_loop_context()

    results, again = asyncio.run(main())
    kinds = [r.kind if isinstance(r, SnmpPollError) else type(r).__name__ for r in results]
    assert kinds == ["malformed", "malformed", "malformed", "timeout", "IfSnapshot"], results
    assert "not increasing" in results[2].message  # type: ignore[union-attr]
    assert isinstance(again, IfSnapshot) and len(again.ifindex) == 16
    assert PARSE_ERRORS["malformed_poll"] - before == 3


def test_target_timing_must_fit_the_interval() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        target_bad = SnmpSettings(timeout_s=0.5, retries=2, interval_s=1.0)
        SnmpTarget("slow", "127.0.0.1", 161, target_bad)


def test_missing_v3_key_is_an_auth_error_not_a_crash() -> None:
    settings = SnmpSettings(version="3", v3_user="u", v3_auth_key="", v3_priv_key="x" * 8)
    result = asyncio.run(SnmpPoller().poll_many([SnmpTarget("v3", "127.0.0.1", 9, settings)]))
    assert isinstance(result[0], SnmpPollError) and result[0].kind == "auth"
    assert "v3_auth_key" in result[0].message
