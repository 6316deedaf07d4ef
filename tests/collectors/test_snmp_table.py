"""The poller against snmpd + a pass_persist ifTable with controlled values: exact decoding,
Counter64 near 2**64, missing columns and cells, wrong types, and rates across two polls."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from collectors.snmp import (
    PARSE_ERRORS,
    IfSnapshot,
    SnmpPoller,
    SnmpTarget,
    close_loop_context,
)
from collectors.snmp.oids import COUNTER_WIDTH_BITS
from fabricmon.core.telemetry.rates import CounterRead, RateReason, counter_rates
from fabricmon.core.topology.spec import SnmpSettings
from tests.agents.netsnmp import Snmpd

pytestmark = pytest.mark.integration

IFX = "1.3.6.1.2.1.31.1.1.1"
IFT = "1.3.6.1.2.1.2.2.1"


def target(agent: Snmpd) -> SnmpTarget:
    return SnmpTarget(
        "leaf", "127.0.0.1", agent.port, SnmpSettings(timeout_s=2.0, retries=1, interval_s=10.0)
    )


def poll(agent: Snmpd, engine: str, **poller_kw: int) -> IfSnapshot:
    async def main() -> IfSnapshot:
        try:
            return await SnmpPoller(engine=engine, **poller_kw).poll(target(agent))  # type: ignore[arg-type]
        finally:
            close_loop_context()

    return asyncio.run(main())


def test_default_table_is_decoded_exactly(table_agent, engine) -> None:  # type: ignore[no-untyped-def]
    agent, _ = table_agent(ports=40)
    snap = poll(agent, engine, max_repetitions=7)  # several GETBULK rounds, rows split across responses
    idx = np.arange(1, 41)
    assert snap.ifindex.tolist() == idx.tolist()
    assert snap.counters["in_octets"].tolist() == (10**12 + idx * 1000 + 6).tolist()
    assert snap.counters["out_octets"].tolist() == (2 * 10**12 + idx * 1000 + 10).tolist()
    assert snap.counters["in_pkts"].tolist() == (10**9 + idx * 100 + 7).tolist()
    assert snap.counters["in_discards"].tolist() == (idx * 3 + 13).tolist()
    assert snap.counters["out_discards"].tolist() == (idx * 3 + 19).tolist()
    assert (snap.high_speed_mbps == 400_000).all()
    assert snap.oper_up.tolist() == (idx % 16 != 0).tolist()
    assert snap.discontinuity_ticks is not None and (snap.discontinuity_ticks == 0).all()
    assert snap.varbinds >= 1 + 40 * 10  # sysUpTime + every cell (+ the rows past each column's end)
    assert set(COUNTER_WIDTH_BITS) == set(snap.counters)


def test_counter64_near_2_to_the_64_is_exact_and_rates_follow(table_agent, engine) -> None:  # type: ignore[no-untyped-def]
    top = 2**64 - 1
    agent, set_state = table_agent(ports=4, state={"values": {f"{IFX}.6.2": ["counter64", str(top - 5000)]}})
    first = poll(agent, engine)
    assert int(first.counters["in_octets"][1]) == top - 5000
    set_state({"values": {f"{IFX}.6.2": ["counter64", str(top)], f"{IFX}.6.3": ["counter64", "5"]}})
    second = poll(agent, engine)
    assert int(second.counters["in_octets"][1]) == top
    speed = second.high_speed_mbps.astype(np.float64) * 1e6

    def as_read(s: IfSnapshot) -> CounterRead:
        return CounterRead(s.ts_ns, s.counters["in_octets"], s.sys_uptime_ticks, s.discontinuity_ticks)

    rates = counter_rates(as_read(first), as_read(second), speed)
    assert rates.delta[1] == 5000.0 and rates.delta[0] == 0.0
    assert rates.reason[2] == RateReason.RESET_DECREASE  # 1e12+… → 5: a reset, never a negative rate


def test_missing_columns_are_absent_and_never_refuse_the_poll(table_agent, engine) -> None:  # type: ignore[no-untyped-def]
    agent, set_state = table_agent(ports=6, state={"omit": [f"{IFX}.7", f"{IFX}.19"]})
    snap = poll(agent, engine)
    assert "in_pkts" not in snap.counters and snap.discontinuity_ticks is None
    assert len(snap.ifindex) == 6
    # No ifHCOutOctets and no ifHighSpeed: once "required column(s) missing", a switch forever down.
    set_state({"omit": [f"{IFX}.10", f"{IFX}.15"]})
    snap = poll(agent, engine)
    assert snap.ifindex.tolist() == list(range(1, 7)) and "out_octets" not in snap.counters
    assert snap.speed_bps is not None and np.isnan(snap.speed_bps).all()
    assert snap.counters["in_octets"].tolist() == [10**12 + i * 1000 + 6 for i in range(1, 7)]


def test_bad_cells_are_gaps_in_their_metric_only_and_are_counted(table_agent, engine) -> None:  # type: ignore[no-untyped-def]
    before = dict(PARSE_ERRORS)
    agent, _ = table_agent(
        ports=8,
        state={
            "values": {
                f"{IFX}.6.3": ["string", "not a counter"],  # wrong type
                f"{IFT}.13.5": ["counter64", "7"],  # Counter64 where Counter32 belongs
            },
            "omit": [f"{IFX}.10.7"],  # a short column
        },
    )
    snap = poll(agent, engine)
    assert snap.ifindex.tolist() == list(range(1, 9)) and snap.dropped_rows == 0  # every port kept
    assert snap.valid is not None
    assert np.flatnonzero(~snap.valid["in_octets"]).tolist() == [2]  # ifIndex 3
    assert np.flatnonzero(~snap.valid["in_discards"]).tolist() == [4]  # ifIndex 5
    assert np.flatnonzero(~snap.valid["out_octets"]).tolist() == [6]  # ifIndex 7
    assert all(v.all() for k, v in snap.valid.items() if k not in ("in_octets", "in_discards", "out_octets"))
    ok = snap.valid["in_octets"]
    assert snap.counters["in_octets"][ok].tolist() == [10**12 + i * 1000 + 6 for i in (1, 2, 4, 5, 6, 7, 8)]
    assert PARSE_ERRORS["bad_cell"] - before.get("bad_cell", 0) == 2
    assert PARSE_ERRORS["dropped_row"] - before.get("dropped_row", 0) == 0


def test_a_large_table_is_read_completely(table_agent, engine) -> None:  # type: ignore[no-untyped-def]
    agent, _ = table_agent(ports=1024)
    snap = poll(agent, engine, max_repetitions=25)
    assert len(snap.ifindex) == 1024 and snap.dropped_rows == 0
    assert int(snap.counters["out_octets"][-1]) == 2 * 10**12 + 1024 * 1000 + 10


def test_ifname_walk_reads_every_name_over_both_engines(table_agent, engine) -> None:  # type: ignore[no-untyped-def]
    agent, _ = table_agent(ports=3, state={"ifindexes": [1, 7, 100001], "names": {"100001": "Port-Channel1"}})

    async def main() -> dict[int, str]:
        try:
            return await SnmpPoller(engine=engine, max_repetitions=2).names(target(agent))  # type: ignore[arg-type]
        finally:
            close_loop_context()

    assert asyncio.run(main()) == {1: "Ethernet1", 7: "Ethernet7", 100001: "Port-Channel1"}


def test_an_agent_without_ifxtable_is_named_by_ifdescr(table_agent, engine) -> None:  # type: ignore[no-untyped-def]
    agent, _ = table_agent(ports=2, state={"omit": [f"{IFX}.1"], "values": {
        f"{IFT}.2.1": ["string", "FastEthernet0/1"], f"{IFT}.2.2": ["string", "FastEthernet0/2"]}})

    async def main() -> dict[int, str]:
        try:
            return await SnmpPoller(engine=engine).names(target(agent))  # type: ignore[arg-type]
        finally:
            close_loop_context()

    assert asyncio.run(main()) == {1: "FastEthernet0/1", 2: "FastEthernet0/2"}
