"""The fast v2c client on real UDP: the twin's agents (in process, small fabric) read by both
engines, and a rewriting proxy in front of a twin agent for the client's own checks (community
echo, request-id, retries, late duplicates, error-status)::

    SnmpPoller(engine="fast") ──UDP──▶ Proxy(mode) ──UDP──▶ twin agent (one switch)
                                ◀── rewritten / dropped / doubled ──┘
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from pyasn1.codec.ber import decoder, encoder
from pysnmp.proto import api

from collectors.snmp import IfSnapshot, SnmpPoller, SnmpPollError, SnmpTarget, close_loop_context, v2c
from fabricmon.core.topology.spec import SnmpSettings
from twin.cluster import Twin
from twin.config import TwinConfig

pytestmark = pytest.mark.integration
V2C = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
SETTINGS = SnmpSettings(timeout_s=2.0, retries=0, interval_s=10.0)


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with Twin(TwinConfig(name="fastv2c", servers=4, gpus_per_server=4, spines=2)) as tw:
        yield tw


def targets(tw: Twin, settings: SnmpSettings = SETTINGS) -> list[SnmpTarget]:
    return [SnmpTarget(sw.name, "127.0.0.1", sw.snmp.port, settings) for sw in tw.fabric.switches]


def test_fast_and_pysnmp_engines_read_the_twin_alike_and_within_its_truth(twin: Twin) -> None:
    async def main() -> tuple[list[Any], list[Any], int, int, int]:
        try:
            t0 = time.time_ns()
            fast = await SnmpPoller(engine="fast", max_repetitions=7).poll_many(targets(twin))
            t1 = time.time_ns()
            endpoints = len(v2c._clients[asyncio.get_running_loop()])
            slow = await SnmpPoller(engine="pysnmp").poll_many(targets(twin))
            return fast, slow, t0, t1, endpoints
        finally:
            close_loop_context()

    fast, slow, t0, t1, endpoints = asyncio.run(main())
    assert endpoints == 1  # every switch went through the one shared socket
    time.sleep(0.3)  # let the twin tick past t1, so its truth at t1 is final
    for sw, f, s in zip(twin.fabric.switches, fast, slow, strict=True):
        assert isinstance(f, IfSnapshot) and isinstance(s, IfSnapshot), (f, s)
        ports = twin.switch_ports(sw.name)
        assert f.ifindex.tolist() == sorted(p["ifindex"] for p in ports) == s.ifindex.tolist()
        assert f.high_speed_mbps.tolist() == s.high_speed_mbps.tolist()
        assert (f.high_speed_mbps == 400_000).all() and f.oper_up.all()
        assert f.dropped_rows == 0 and set(f.counters) == set(s.counters)
        assert f.sys_uptime_ticks is not None and f.varbinds > 10 * len(ports)
        order = np.argsort([p["ifindex"] for p in ports])
        lo, hi = twin.counters_at(sw.name, t0), twin.counters_at(sw.name, t1)
        for ours, theirs in (("in_octets", "ifHCInOctets"), ("out_octets", "ifHCOutOctets")):
            got = f.counters[ours].astype(np.float64)
            assert (lo[theirs][order] <= got + 1).all() and (got <= hi[theirs][order] + 1).all(), sw.name
            assert (s.counters[ours] >= f.counters[ours]).all()  # read later, counters only grow


class Proxy(asyncio.DatagramProtocol):
    """Forwards one client's requests to an agent and rewrites the answers per ``mode``."""

    def __init__(self, mode: str, agent: tuple[str, int]) -> None:
        self.mode, self.agent = mode, agent
        self.transport: Any = None
        self.upstream: Any = None
        self.client: Any = None
        self.requests = 0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if addr == self.agent:
            self.answer(data)
            return
        self.client = addr
        self.requests += 1
        if self.mode == "drop_first" and self.requests == 1:
            return
        self.transport.sendto(data, self.agent)

    def answer(self, data: bytes) -> None:
        if self.mode in ("community", "request_id", "too_big"):
            msg, _ = decoder.decode(data, asn1Spec=V2C.Message())
            pdu = V2C.apiMessage.get_pdu(msg)
            if self.mode == "community":
                V2C.apiMessage.set_community(msg, b"private")
            elif self.mode == "request_id":
                V2C.apiPDU.set_request_id(pdu, int(V2C.apiPDU.get_request_id(pdu)) ^ 0x5A5A)
            else:
                V2C.apiPDU.set_error_status(pdu, 1)
                V2C.apiPDU.set_error_index(pdu, 0)
            V2C.apiMessage.set_pdu(msg, pdu)
            data = bytes(encoder.encode(msg))
        self.transport.sendto(data, self.client)
        if self.mode == "duplicate":
            self.transport.sendto(data, self.client)


async def proxied(mode: str, agent_port: int) -> tuple[Proxy, int]:
    loop = asyncio.get_running_loop()
    transport, proxy = await loop.create_datagram_endpoint(
        lambda: Proxy(mode, ("127.0.0.1", agent_port)), local_addr=("127.0.0.1", 0)
    )
    return proxy, transport.get_extra_info("sockname")[1]


@pytest.mark.parametrize(
    ("mode", "retries", "kind", "text"),
    [
        ("community", 0, "malformed", "community"),
        ("request_id", 0, "malformed", "request-id"),
        ("too_big", 0, "agent_error", "tooBig"),
        ("drop_first", 0, "timeout", "no response"),
        ("drop_first", 1, None, ""),
        ("duplicate", 0, None, ""),
    ],
)
def test_client_checks_each_answer(twin: Twin, mode: str, retries: int, kind: str | None, text: str) -> None:
    agent_port = twin.fabric.switches[0].snmp.port
    settings = SnmpSettings(timeout_s=0.4, retries=retries, interval_s=10.0)

    async def main() -> tuple[list[Any], Proxy, int]:
        proxy, port = await proxied(mode, agent_port)
        try:
            poller = SnmpPoller(engine="fast", max_repetitions=3)  # several requests per poll
            target = SnmpTarget("leaf", "127.0.0.1", port, settings)
            t0 = time.time_ns()
            first = await poller.poll_many([target])
            second = await poller.poll(SnmpTarget("direct", "127.0.0.1", agent_port, settings))
            return [*first, second], proxy, t0
        finally:
            proxy.transport.close()
            close_loop_context()

    (result, direct), proxy, t0 = asyncio.run(main())
    assert isinstance(direct, IfSnapshot)  # the shared client is fine after any of it
    if kind is None:
        assert isinstance(result, IfSnapshot), result
        assert result.ifindex.tolist() == direct.ifindex.tolist()
        assert proxy.requests >= 2
        if mode == "drop_first":  # the answer is stamped from the resend (>= t0 + timeout), not the lost try
            assert result.cell_ts_ns is not None
            assert min(int(v.min()) for v in result.cell_ts_ns.values()) >= t0 + 0.4e9
    else:
        assert isinstance(result, SnmpPollError) and result.kind == kind, result
        assert text in result.message


def test_polls_from_many_loops_each_get_their_own_endpoint(twin: Twin) -> None:
    target = targets(twin)[0]
    for _ in range(3):

        async def main() -> IfSnapshot:
            try:
                return await SnmpPoller().poll(target)
            finally:
                close_loop_context()
                assert asyncio.get_running_loop() not in v2c._clients

        assert isinstance(asyncio.run(main()), IfSnapshot)


@pytest.mark.parametrize("engine", ["fast", "pysnmp"])
def test_each_cell_carries_the_read_time_of_its_response(twin: Twin, engine: str) -> None:
    """With 2 rows per GETBULK a leaf's walk spans several responses: each cell is stamped with
    the one that carried it, inside the poll, later rows never earlier, a row's columns alike."""

    async def main() -> tuple[list[Any], int, int]:
        try:
            t0 = time.time_ns()
            snaps = await SnmpPoller(engine=engine, max_repetitions=2).poll_many(targets(twin))  # type: ignore[arg-type]
            return snaps, t0, time.time_ns()
        finally:
            close_loop_context()

    snaps, t0, t1 = asyncio.run(main())
    for snap in snaps:
        assert isinstance(snap, IfSnapshot) and snap.cell_ts_ns is not None, snap
        assert set(snap.cell_ts_ns) == set(snap.counters)
        n = len(snap.ifindex)
        for key, ts in snap.cell_ts_ns.items():
            assert ts.dtype == np.int64 and ts.shape == (n,), key
            assert (t0 <= ts).all() and (ts <= t1).all(), key
            assert (np.diff(ts) >= 0).all(), f"{snap.switch} {key}: a later row read earlier"
            assert len(np.unique(ts)) >= n // 2, f"{snap.switch} {key}: {n} rows in too few responses"
        # the twin answers whole repetitions, so a row's columns share their response
        np.testing.assert_array_equal(snap.cell_ts_ns["in_octets"], snap.cell_ts_ns["out_octets"])
