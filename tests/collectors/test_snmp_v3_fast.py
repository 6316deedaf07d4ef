"""SNMPv3 authPriv on the fast client against a real net-snmp snmpd (users created in a temp dir):
the same table as pysnmp and as ``snmpbulkwalk -v3`` read, named errors for a wrong key or user,
and an agent restart (new boots, same engine id) followed without a lost poll::

    SnmpPoller(engine="fast") ──USM/UDP──▶ snmpd (pass_persist IF-MIB, 40 ports, 3 v3 users)
    SnmpPoller(engine="pysnmp") ─────────▶    same agent
    snmpbulkwalk -v3 -l authPriv ────────▶    same agent
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from collectors.snmp import IfSnapshot, SnmpPoller, SnmpPollError, SnmpTarget, close_loop_context, v2c
from collectors.snmp.oids import COLUMNS, dotted
from fabricmon.core.topology.spec import SnmpSettings
from tests.agents.netsnmp import Snmpd, V3User, start_snmpd
from twin.cluster import Twin
from twin.config import TwinConfig

pytestmark = pytest.mark.integration
USERS = {  # our protocol word → the agent's user (net-snmp spells SHA-256 with the dash)
    "SHA256": V3User("fm256", "SHA-256", "authpass256", "AES", "privpass256"),
    "SHA": V3User("fmsha", "SHA", "authpass123", "AES", "privpass123"),
    "MD5": V3User("fmmd5", "MD5", "authpassmd5", "AES", "privpassmd5"),
}
PORTS = 40


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Snmpd]:
    a = start_snmpd(tmp_path_factory.mktemp("snmpd-v3"), v3_users=tuple(USERS.values()), iftable_ports=PORTS)
    yield a
    a.stop()


def target(agent: Snmpd, auth: str, *, name: str = "", **kw: Any) -> SnmpTarget:
    u = USERS[auth]
    settings = SnmpSettings(
        version="3", v3_user=kw.pop("user", u.name), v3_auth_protocol=auth,
        v3_auth_key=kw.pop("auth_key", u.auth_key), v3_priv_protocol="AES",
        v3_priv_key=kw.pop("priv_key", u.priv_key), timeout_s=kw.pop("timeout_s", 5.0), retries=0,
        interval_s=10.0,
    )  # fmt: skip
    return SnmpTarget(name or f"sw-{auth}", "127.0.0.1", agent.port, settings)


def poll_all(engine: str, targets: list[SnmpTarget]) -> list[IfSnapshot | SnmpPollError]:
    async def main() -> list[IfSnapshot | SnmpPollError]:
        try:
            return await SnmpPoller(engine=engine).poll_many(targets)  # type: ignore[arg-type]
        finally:
            close_loop_context()

    return asyncio.run(main())


def bulkwalk(agent: Snmpd, u: V3User, oid: str, workdir: Path) -> dict[int, int]:
    out = subprocess.run(
        ["snmpbulkwalk", "-v3", "-l", "authPriv", "-u", u.name, "-a", u.auth_protocol, "-A", u.auth_key,
         "-x", u.priv_protocol, "-X", u.priv_key, "-On", "-Oq", "-Ov", "-OU", "-Cr25", "-t", "5", "-r", "0",
         f"127.0.0.1:{agent.port}", oid],
        capture_output=True, check=True, text=True,
        env={**os.environ, "SNMP_PERSISTENT_DIR": str(workdir), "MIBS": ""},
    ).stdout  # fmt: skip
    values = [int(line.split()[-1]) for line in out.splitlines() if line.strip()]
    return dict(enumerate(values, start=1))  # pass_persist serves ifIndex 1..PORTS, no gaps


@pytest.mark.parametrize("auth", list(USERS))
def test_authpriv_reads_what_pysnmp_and_snmpbulkwalk_read(agent: Snmpd, auth: str, tmp_path: Path) -> None:
    (fast,) = poll_all("fast", [target(agent, auth)])
    (slow,) = poll_all("pysnmp", [target(agent, auth)])
    assert isinstance(fast, IfSnapshot) and isinstance(slow, IfSnapshot), (fast, slow)
    assert fast.ifindex.tolist() == list(range(1, PORTS + 1)) == slow.ifindex.tolist()
    assert fast.varbinds == slow.varbinds and fast.dropped_rows == 0 == slow.dropped_rows
    assert set(fast.counters) == set(slow.counters) == {c.key for c in COLUMNS if c.key in fast.counters}
    for key in fast.counters:  # the pass_persist table is static: every read is the same
        assert np.array_equal(fast.counters[key], slow.counters[key]), key
    assert np.array_equal(fast.high_speed_mbps, slow.high_speed_mbps)
    assert np.array_equal(fast.oper_up, slow.oper_up)
    by_key = {c.key: c for c in COLUMNS}
    for key in ("in_octets", "out_pkts", "in_discards"):
        walked = bulkwalk(agent, USERS[auth], dotted(by_key[key].oid), tmp_path)
        assert [walked[i] for i in fast.ifindex.tolist()] == fast.counters[key].tolist(), key
    walked = bulkwalk(agent, USERS[auth], dotted(by_key["high_speed_mbps"].oid), tmp_path)
    assert [walked[i] for i in fast.ifindex.tolist()] == fast.high_speed_mbps.tolist()


def test_wrong_key_user_or_priv_key_is_a_named_auth_error_and_the_good_target_still_polls(
    agent: Snmpd,
) -> None:
    results = poll_all("fast", [
        target(agent, "SHA256", name="bad-auth", auth_key="wrongwrong1"),
        target(agent, "SHA256", name="nobody", user="nobody"),
        target(agent, "SHA", name="bad-priv", priv_key="wrongwrong1", timeout_s=0.5),
        target(agent, "SHA256", name="good"),
    ])  # fmt: skip
    bad_auth, nobody, bad_priv, good = results
    assert isinstance(good, IfSnapshot) and len(good.ifindex) == PORTS, good
    for err, words in ((bad_auth, "wrongDigest"), (nobody, "unknownUserName"), (bad_priv, "wrong priv key")):
        assert isinstance(err, SnmpPollError) and err.kind == "auth", err
        assert words in err.message, err
    assert agent.process.poll() is None


def test_an_agent_restart_is_followed_through_its_new_boots(tmp_path: Path) -> None:
    """Our cached session holds the old engine id and boots; the restarted agent answers with a
    Report (unknownEngineID or notInTimeWindow), the session takes what it says and the same
    poll succeeds."""
    u = USERS["SHA256"]
    first = start_snmpd(tmp_path / "a", v3_users=(u,), iftable_ports=4)
    try:
        t = target(first, "SHA256")

        async def main() -> list[Any]:
            try:
                poller = SnmpPoller(engine="fast")
                before = await poller.poll(t)
                session = v2c.session_for(("127.0.0.1", first.port), t.settings)
                boots, engine_id = session.boots, session.engine_id
                restart(first)
                after = await poller.poll(t)
                return [before, after, boots, engine_id, session.boots, session.engine_id]
            finally:
                close_loop_context()

        before, after, boots, engine_id, new_boots, new_engine_id = asyncio.run(main())
        # net-snmp 5.9 here starts with a new engine id (unknownEngineID → discovered again); one
        # that keeps it counts boots up (notInTimeWindow → the new boots taken): either is followed.
        assert new_engine_id != engine_id or new_boots == boots + 1, (engine_id, new_engine_id, new_boots)
        assert isinstance(before, IfSnapshot) and isinstance(after, IfSnapshot), (before, after)
        assert after.ifindex.tolist() == [1, 2, 3, 4]
        assert "Authentication failed" not in first.log
    finally:
        first.stop()


def restart(agent: Snmpd) -> None:
    """Stop snmpd and start it again with the same config, port and persistent dir."""
    args = agent.process.args
    agent.stop()
    (agent.workdir / "snmpd.log").write_text("")
    agent.process = subprocess.Popen(args, env={**os.environ, "SNMP_PERSISTENT_DIR": str(agent.workdir / "persist"),
                                                "MIBS": ""}, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    for _ in range(500):
        if "NET-SNMP version" in agent.log and agent.process.poll() is None:
            return
        time.sleep(0.02)
    raise RuntimeError(f"snmpd did not restart: {agent.log[-2000:]}")


def test_the_twins_pysnmp_v3_agent_is_read_alike_by_both_engines() -> None:
    """A second USM implementation on the agent side (pysnmp's command responder, SHA + AES)."""
    with Twin(TwinConfig(name="v3fast", snmp_version="3", servers=4, gpus_per_server=4, spines=2)) as tw:
        # generous timeouts: this compares what the engines read, not how fast (the twin's agent shares
        # this process, and a loaded CI machine once made pysnmp's first v3 poll time out)
        targets = [SnmpTarget(sw.name, "127.0.0.1", sw.snmp.port, replace(sw.snmp, interval_s=10.0, timeout_s=3.0, retries=2))
                   for sw in tw.fabric.switches]
        t0 = time.time_ns()
        fast = poll_all("fast", targets)
        t1 = time.time_ns()
        slow = poll_all("pysnmp", targets)
        time.sleep(0.3)  # let the twin tick past the polls, so its truth there is final
        t2 = time.time_ns()
        for sw, f, s in zip(tw.fabric.switches, fast, slow, strict=True):
            assert isinstance(f, IfSnapshot) and isinstance(s, IfSnapshot), (f, s)
            assert f.ifindex.tolist() == sorted(p.ifindex for p in sw.ports) == s.ifindex.tolist()
            assert set(f.counters) == set(s.counters) and f.dropped_rows == 0
            order = np.argsort([p["ifindex"] for p in tw.switch_ports(sw.name)])
            lo, hi = tw.counters_at(sw.name, t0)["ifHCInOctets"][order], tw.counters_at(sw.name, t1)["ifHCInOctets"][order]
            got = f.counters["in_octets"].astype(np.float64)
            assert (lo <= got + 1).all() and (got <= hi + 1).all(), sw.name
            assert (s.counters["in_octets"] >= f.counters["in_octets"]).all()  # read later
            assert (s.counters["in_octets"] <= tw.counters_at(sw.name, t2)["ifHCInOctets"][order] + 1).all()
