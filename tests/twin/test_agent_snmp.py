"""The twin's SNMP agents answer real clients on loopback: net-snmp (C) and pysnmp 7, v2c and v3."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from netsnmp_cli import net_snmp, parse_walk
from pysnmp.hlapi.v3arch.asyncio import (
    USM_AUTH_HMAC96_SHA,
    USM_PRIV_CFB128_AES,
    CommunityData,
    ContextData,
    ObjectIdentity,
    ObjectType,
    SnmpEngine,
    UdpTransportTarget,
    UsmUserData,
    bulk_cmd,
)

from twin.cluster import Twin
from twin.config import TwinConfig

pytestmark = pytest.mark.integration
IFX = "1.3.6.1.2.1.31.1.1.1"
HC_IN = f"{IFX}.6"
SMALL = {"servers": 4, "gpus_per_server": 4, "spines": 2}


def _bulk(port: int, auth, oids: list[str], max_rep: int = 20):
    async def go():
        engine = SnmpEngine()
        target = await UdpTransportTarget.create(("127.0.0.1", port), timeout=2, retries=1)
        try:
            return await bulk_cmd(engine, auth, target, ContextData(), 0, max_rep,
                                  *[ObjectType(ObjectIdentity(o)) for o in oids], lookupMib=False)
        finally:
            engine.close_dispatcher()

    return asyncio.run(go())


def test_snmpbulkwalk_ifxtable_names_aliases_speeds_and_counters(small_twin: Twin):
    tw = small_twin
    sw = tw.fabric.switches[0]
    t_before = time.time_ns()
    res = net_snmp("snmpbulkwalk", "-v2c", "-c", "public", "-On", "-Cr25", f"127.0.0.1:{sw.snmp.port}", IFX)
    t_after = time.time_ns()
    assert res.returncode == 0, res.stderr
    got = parse_walk(res.stdout)
    n_ports = len(sw.ports)
    assert len(got) == n_ports * 8  # 8 ifXTable columns
    assert got[f"{IFX}.1.1"] == 'STRING: "Ethernet1"'
    assert got[f"{IFX}.15.1"] == "Gauge32: 400000"
    assert got[f"{IFX}.18.1"] == 'STRING: "node001 gpu0 mlx5_0"'
    assert got[f"{IFX}.18.{n_ports}"].startswith('STRING: "spine1:Ethernet')
    # Counter values lie between the truth just before and just after the walk.
    lo = tw.counters_at(sw.name, t_before)["ifHCInOctets"]
    hi = tw.counters_at(sw.name, t_after)["ifHCInOctets"]
    for k, p in enumerate(sw.ports):
        v = int(got[f"{HC_IN}.{p.ifindex}"].split(": ")[1])
        assert int(lo[k]) <= v <= int(hi[k])


def test_snmpget_sysuptime_sysname_and_missing_objects(small_twin: Twin):
    sw = small_twin.fabric.switches[-1]
    res = net_snmp("snmpget", "-v2c", "-c", "public", "-On", f"127.0.0.1:{sw.snmp.port}",
                   "1.3.6.1.2.1.1.3.0", "1.3.6.1.2.1.1.5.0", "1.3.6.1.2.1.2.2.1.8.1", "1.3.6.1.2.1.1.3.7",
                   "1.3.6.1.4.1.9.9.9.0")
    got = parse_walk(res.stdout)
    assert got["1.3.6.1.2.1.1.3.0"].startswith("Timeticks: (")
    assert got["1.3.6.1.2.1.1.5.0"] == f'STRING: "{sw.name}"'
    assert got["1.3.6.1.2.1.2.2.1.8.1"] == "INTEGER: 1"
    assert "No Such Instance" in got["1.3.6.1.2.1.1.3.7"]
    assert "No Such Object" in got["1.3.6.1.4.1.9.9.9.0"]


def test_wrong_community_gets_no_answer(small_twin: Twin):
    sw = small_twin.fabric.switches[0]
    res = net_snmp("snmpget", "-v2c", "-c", "wrong", "-t", "0.3", "-r", "0", f"127.0.0.1:{sw.snmp.port}",
                   "1.3.6.1.2.1.1.3.0")
    assert res.returncode != 0 and "Timeout" in res.stderr


def test_pysnmp_v2c_multi_column_bulk_matches_truth(small_twin: Twin):
    tw = small_twin
    sw = tw.fabric.switches[1]
    t1 = time.time_ns()
    ei, es, _ix, vbs = _bulk(sw.snmp.port, CommunityData("public"),
                             [HC_IN, f"{IFX}.10", "1.3.6.1.2.1.2.2.1.19"], max_rep=len(sw.ports))
    t2 = time.time_ns()
    assert ei is None and int(es) == 0
    rows = {tuple(name): val for name, val in vbs}
    lo, hi = tw.counters_at(sw.name, t1), tw.counters_at(sw.name, t2)
    for k, p in enumerate(sw.ports):
        v_in = rows[(*map(int, HC_IN.split(".")), p.ifindex)]
        assert type(v_in).__name__ == "Counter64"
        assert int(lo["ifHCInOctets"][k]) <= int(v_in) <= int(hi["ifHCInOctets"][k])
        v_disc = rows[(1, 3, 6, 1, 2, 1, 2, 2, 1, 19, p.ifindex)]
        assert type(v_disc).__name__ == "Counter32"


def test_pysnmp_v3_sha_aes_and_net_snmp_v3():
    with Twin(TwinConfig(name="v3", snmp_version="3", **SMALL)) as tw:
        sw = tw.fabric.switches[0]
        u = tw.cfg.v3_user
        auth = UsmUserData(u.name, authKey=u.auth_key, privKey=u.priv_key,
                           authProtocol=USM_AUTH_HMAC96_SHA, privProtocol=USM_PRIV_CFB128_AES)
        t1 = time.time_ns()
        ei, es, _ix, vbs = _bulk(sw.snmp.port, auth, [HC_IN, "1.3.6.1.2.1.1.3"], max_rep=4)
        t2 = time.time_ns()
        assert ei is None and int(es) == 0, ei
        first = vbs[0]
        assert tuple(first[0]) == (*map(int, HC_IN.split(".")), 1)
        lo = int(tw.counters_at(sw.name, t1)["ifHCInOctets"][0])
        hi = int(tw.counters_at(sw.name, t2)["ifHCInOctets"][0])
        assert lo <= int(first[1]) <= hi
        # One engine serves every switch: each port answers with its own switch's objects.
        for other in tw.fabric.switches[-2:]:
            ei, es, _ix, vbs = _bulk(other.snmp.port, auth, ["1.3.6.1.2.1.1.4"], max_rep=2)
            assert ei is None and str(vbs[0][1]) == other.name
        # A wrong key is refused (no data).
        bad = UsmUserData(u.name, authKey="wrong-key-123", privKey=u.priv_key,
                          authProtocol=USM_AUTH_HMAC96_SHA, privProtocol=USM_PRIV_CFB128_AES)
        ei, _es, _ix, vbs = _bulk(sw.snmp.port, bad, [HC_IN], max_rep=2)
        assert ei is not None and not vbs
        res = net_snmp("snmpbulkwalk", "-v3", "-l", "authPriv", "-u", u.name, "-a", "SHA", "-A", u.auth_key,
                       "-x", "AES", "-X", u.priv_key, "-On", "-Cr25", f"127.0.0.1:{sw.snmp.port}", HC_IN)
        assert res.returncode == 0, res.stderr
        assert len(parse_walk(res.stdout)) == len(sw.ports)


def test_malformed_datagrams_do_not_kill_the_agent(small_twin: Twin):
    sw = small_twin.fabric.switches[2]
    garbage = [b"", b"\x30", b"\x30\x84\xff\xff\xff\xff", b"\x30\x03\x02\x01\x01", b"\x00" * 100,
               b"\x30\x0c\x02\x01\x01\x04\x06public\xa0\x00", bytes(range(256)),
               b"\x30\x1a\x02\x01\x01\x04\x06public\xa5\x0d\x02\x01\x01\x02\x01\x00\x02\x01\x05\x30\x02\x30\x00"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for g in garbage:
            s.sendto(g, ("127.0.0.1", sw.snmp.port))
    res = net_snmp("snmpget", "-v2c", "-c", "public", "-On", f"127.0.0.1:{sw.snmp.port}", "1.3.6.1.2.1.1.5.0")
    assert f'"{sw.name}"' in res.stdout
    assert small_twin.status()["switches"][sw.name]["malformed"] >= len(garbage) - 1
