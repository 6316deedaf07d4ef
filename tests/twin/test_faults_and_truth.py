"""Faults on command (restart, unreachable, wrap) and the ground truth the twin reports."""

from __future__ import annotations

import time

import numpy as np
import pytest
from netsnmp_cli import net_snmp, parse_walk

from twin.cluster import Twin
from twin.config import TwinConfig

pytestmark = pytest.mark.integration
SMALL = {"servers": 4, "gpus_per_server": 4, "spines": 2}
UPTIME = "1.3.6.1.2.1.1.3.0"
HC_IN_1 = "1.3.6.1.2.1.31.1.1.1.6.1"
DISC_1 = "1.3.6.1.2.1.31.1.1.1.19.1"
NS = 1_000_000_000


def _get(tw: Twin, switch: str, *oids: str, timeout: str = "1") -> dict[str, str]:
    port = tw.fabric.switch(switch).snmp.port
    res = net_snmp("snmpget", "-v2c", "-c", "public", "-On", "-t", timeout, "-r", "0", f"127.0.0.1:{port}", *oids)
    return parse_walk(res.stdout) if res.returncode == 0 else {"error": res.stderr}


def _num(v: str) -> int:
    return int(v.split("(")[1].split(")", maxsplit=1)[0]) if v.startswith("Timeticks") else int(v.split(": ")[1])


@pytest.fixture
def faulty_twin():
    with Twin(TwinConfig(name="faulty", **SMALL)) as tw:
        time.sleep(0.4)
        yield tw


def test_restart_drops_sysuptime_and_counters(faulty_twin: Twin):
    tw = faulty_twin
    before = _get(tw, "leaf-r1", UPTIME, HC_IN_1)
    tw.restart("leaf-r1")
    after = _get(tw, "leaf-r1", UPTIME, HC_IN_1)
    assert _num(after[UPTIME]) < _num(before[UPTIME])
    assert _num(after[HC_IN_1]) < _num(before[HC_IN_1])
    assert _num(after[HC_IN_1]) < 50e9 * 0.5  # restarted from 0: at most ~0.5 s of line rate
    # Other switches are untouched.
    assert _num(_get(tw, "leaf-r0", UPTIME)[UPTIME]) >= _num(before[UPTIME])


def test_unreachable_switch_times_out_and_comes_back(faulty_twin: Twin):
    tw = faulty_twin
    tw.set_unreachable("spine0", True)
    assert "Timeout" in _get(tw, "spine0", UPTIME, timeout="0.3")["error"]
    assert UPTIME in _get(tw, "spine1", UPTIME)
    tw.set_unreachable("spine0", False)
    assert UPTIME in _get(tw, "spine0", UPTIME)


def test_wrap_passes_2_64_and_restarts_near_zero(faulty_twin: Twin):
    tw = faulty_twin
    tw.wrap("leaf-r2", seconds_to_wrap=0.6)
    first = _get(tw, "leaf-r2", HC_IN_1, DISC_1)
    assert _num(first[HC_IN_1]) > 2**64 - 30e9  # just below 2^64 (≤ 0.6 s at ≤ 400G)
    assert _num(first[DISC_1]) > 0  # the jump is flagged as a discontinuity
    time.sleep(0.9)
    second = _get(tw, "leaf-r2", HC_IN_1)
    assert _num(second[HC_IN_1]) < 60e9  # wrapped: small again
    # The truth is unaffected by the wrap: rates stay physical.
    t2 = time.time_ns()
    rate = tw.true_rates("leaf-r2", t2 - NS, t2)["in_octets_per_s"][0]
    assert 0 < rate <= 50e9


def test_truth_matches_counter_differences_and_rates_never_exceed_line_rate(small_twin: Twin):
    tw = small_twin
    time.sleep(0.3)
    now = time.time_ns()
    t1, t2 = max(tw.t0_ns + 1, now - 2 * NS), now - 1_000
    for sw in tw.fabric.switches:
        truth = tw.true_rates(sw.name, t1, t2)
        c1, c2 = tw.counters_at(sw.name, t1), tw.counters_at(sw.name, t2)
        for metric, rate in (("ifHCInOctets", "in_octets_per_s"), ("ifHCOutOctets", "out_octets_per_s")):
            measured = (c2[metric] - c1[metric]).astype(float) / ((t2 - t1) / NS)
            np.testing.assert_allclose(measured, truth[rate], rtol=1e-6, atol=50)
    # Per tick, every port's rate is within line rate, and counters sampled densely never decrease.
    rates = tw.true_rates(None, t1, t2)
    line_bytes_per_s = tw.ports.speed_bps / 8
    for t in range(t1, t2, 20_000_000):
        r = tw.true_rates(None, t, t + 20_000_000)
        assert np.all(r["out_octets_per_s"] <= line_bytes_per_s * (1 + 1e-6))
        assert np.all(r["in_octets_per_s"] <= line_bytes_per_s * (1 + 1e-6))
    samples = np.stack([tw.counters_at(None, t)["ifHCOutOctets"] for t in range(t1, t2, 7_000_000)])
    assert np.all(np.diff(samples.astype(object), axis=0) >= 0)
    assert rates["out_octets_per_s"].sum() > 0


def test_hottest_port_faces_the_hot_gpu_on_one_su():
    with Twin(TwinConfig(name="su1")) as tw:  # the default 1 SU: 256 GPUs, 12 switches
        time.sleep(1.2)
        t2 = time.time_ns()
        t1 = t2 - NS
        hot = tw.hottest_port(t1, t2)
        out = tw.true_rates(None, t1, t2)["out_octets_per_s"][tw.ports.host_facing]
        phases = tw.phases(t1, t2)
        assert phases and {p["phase"] for p in phases} == {"dispatch", "combine"}
        hot_gpus = {tw.wiring.gpu_labels[int(p["hot_gpu"])] for p in phases}
        assert any(hot.peer.startswith(label + " ") for label in hot_gpus), (hot, hot_gpus)
        assert hot.switch.startswith("leaf-r")
        # At a 1 s poll the dispatch incast (≈4.5× per phase) is diluted by the combine phases.
        assert hot.out_octets_per_s / out.mean() > 1.8
        assert hot.utilization <= 1.0
        # the hotspot truth a soak run scores against: the hot GPU's stretches and their ports
        spots = tw.hotspots(t1, t2)
        assert spots and all(s["start_ns"] < s["end_ns"] for s in spots)
        assert {s["hot_gpu"] for s in spots} <= {int(p["hot_gpu"]) for p in phases}
        assert f"{hot.switch}:" in " ".join(s["port"] for s in spots)


def test_hotspots_name_the_hot_port_of_every_ep_group():
    """4 servers x 4 GPUs in EP groups of 8: one gate, so the hot expert's GPU is hot in both
    groups — group 0's port first, then group 1's (8 GPUs further)."""
    from twin.moe import MoeConfig

    with Twin(TwinConfig(name="groups", **SMALL, job=MoeConfig(ep_size=8))) as tw:
        time.sleep(0.5)
        t2 = time.time_ns()
        spots = [s for s in tw.hotspots(t2 - 400_000_000, t2) if s["hot_gpu"] >= 0]
        assert spots and tw.status()["job_stalled_s"] == 0.0
        for s in spots:
            assert s["ports"] == [tw._nic_port(s["hot_gpu"]), tw._nic_port(s["hot_gpu"] + 8)]
            assert s["port"] == s["ports"][0]
