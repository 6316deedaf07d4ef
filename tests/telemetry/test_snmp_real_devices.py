"""The collector against agents that behave like real, mixed-fleet switches (issue 14).

Four net-snmp ``snmpd`` agents on loopback, each serving a pass_persist IF-MIB with one real
device's quirks, polled by the real shard loop (``services.run_shard``, real Redis) every 1 s::

    legacy  32-bit ifTable only (no ifXTable counters, no ifHighSpeed), ifIndex gaps (1 2 5 9 10
            1001 2001), a tunnel and a VLAN interface, a 32-bit counter wrapping mid-test, and a
            100G port whose 32-bit counter could wrap several times a second (withheld)
    lagsw   HC counters but no ifHighSpeed (speed from ifSpeed, else the topology), and a LAG
            (Port-Channel1 at ifIndex 100001) without an ifInDiscards cell
    cache   counters the agent refreshes only every 3 s (a counter cache)
    renum   restarted mid-test with its ifIndexes renumbered (the names rotate over 1 2 3)

Each: every port of the topology is there by name with the rate the agent's counters grow at, no
port lost for an optional cell, and its health says why a metric is withheld.
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from telemetry_harness import run_collectors

from fabricmon.core.telemetry.rates import RateReason
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.spec import FabricSpec, PortSpec, SnmpSettings, SwitchSpec
from fabricmon.telemetry import live_window
from fabricmon.telemetry.shard_loop import PollRecord
from fabricmon.telemetry.shards import plan_shards
from tests.agents.netsnmp import Snmpd, start_snmpd

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

IFX = "1.3.6.1.2.1.31.1.1.1"
IFT = "1.3.6.1.2.1.2.2.1"
G = 10**9
SAT = 2**32 - 1  # ifSpeed saturated: "faster than 4.29 Gb/s, ask ifHighSpeed"

# switch → (pass_persist state, topology ports: (name, configured ifIndex, topology speed bit/s))
LEGACY_RATES = {1: [5e6, 1e6], 2: [0, 0], 5: [50e6, 20e6], 9: [200e6, 100e6], 10: [1e9, 1e9],
                1001: [1e6, 1e6], 2001: [2e6, 3e6]}  # fmt: skip
DEVICES: dict[str, tuple[dict[str, Any], list[tuple[str, int, int]]]] = {
    "legacy": (
        {"ifindexes": [1, 2, 5, 9, 10, 1001, 2001], "ift32": True,
         "names": {"1": "Fa0/1", "2": "Fa0/2", "5": "Gi0/5", "9": "Te0/9", "10": "Hu0/10",
                   "1001": "Tunnel1", "2001": "Vlan100"},
         "omit": [f"{IFX}.6", f"{IFX}.7", f"{IFX}.10", f"{IFX}.11", f"{IFX}.15", f"{IFX}.19"],
         "speed_bps": {"1": 100_000_000, "2": 100_000_000, "5": G, "9": SAT, "10": SAT, "1001": 0, "2001": G},
         "rates": {str(k): v for k, v in LEGACY_RATES.items()}},
        [("Fa0/1", 1, G), ("Fa0/2", 2, G), ("Gi0/5", 5, G), ("Te0/9", 9, 10 * G), ("Hu0/10", 10, 100 * G),
         ("Tunnel1", 1001, 10 * G), ("Vlan100", 2001, 10 * G)],
    ),
    "lagsw": (
        {"ifindexes": [1, 2, 3, 100001], "ift32": True,
         "names": {"100001": "Port-Channel1"},
         "omit": [f"{IFX}.15", f"{IFT}.13.100001"],
         "speed_bps": {"1": G, "2": SAT, "3": SAT, "100001": SAT},
         "rates": {"1": [50e6, 10e6], "2": [300e6, 200e6], "3": [0, 0], "100001": [2e9, 1e9]}},
        [("Ethernet1", 1, 10 * G), ("Ethernet2", 2, 10 * G), ("Ethernet3", 3, 10 * G),
         ("Port-Channel1", 100001, 20 * G)],
    ),
    "cache": (
        {"ifindexes": [1, 2], "rates": {"1": [100e6, 50e6], "2": [10e6, 0]}, "refresh_s": 3},
        [("Ethernet1", 1, 400 * G), ("Ethernet2", 2, 400 * G)],
    ),
    "renum": (
        {"ifindexes": [1, 2, 3], "rates": {"1": [10e6, 1e6], "2": [40e6, 4e6], "3": [160e6, 16e6]}},
        [("Ethernet1", 1, 400 * G), ("Ethernet2", 2, 400 * G), ("Ethernet3", 3, 400 * G)],
    ),
}
# After the restart: the same three rows, the names rotated, each name keeping its traffic.
RENUMBERED = {"ifindexes": [1, 2, 3], "names": {"1": "Ethernet3", "2": "Ethernet1", "3": "Ethernet2"},
              "rates": {"1": [160e6, 16e6], "2": [10e6, 1e6], "3": [40e6, 4e6]}}  # fmt: skip
TRUTH_BPS = {  # (switch, port) → (in, out) bit/s
    **{("legacy", n): (8 * LEGACY_RATES[i][0], 8 * LEGACY_RATES[i][1]) for n, i, _ in DEVICES["legacy"][1]},
    ("lagsw", "Ethernet1"): (400e6, 80e6), ("lagsw", "Ethernet2"): (2.4e9, 1.6e9),
    ("lagsw", "Ethernet3"): (0.0, 0.0), ("lagsw", "Port-Channel1"): (16e9, 8e9),
    ("cache", "Ethernet1"): (800e6, 400e6), ("cache", "Ethernet2"): (80e6, 0.0),
    ("renum", "Ethernet1"): (80e6, 8e6), ("renum", "Ethernet2"): (320e6, 32e6),
    ("renum", "Ethernet3"): (1280e6, 128e6),
}  # fmt: skip


# pass_persist answers one varbind per pipe round trip, so a GETBULK of 100 cells takes 10-100 ms,
# and on a loaded box (load 5-8 on 2 cores while these ran) the agent's own read of a cell can lag
# its response's stamp by a few hundred ms: one 1 s sample is then off by that share, and its
# neighbour by the opposite (the bytes are all there). So: the bytes over all samples (rate x span)
# within 3 % of the truth, the median sample within 10 %, 70 % within 15 %, every one within 3x —
# a mixed-up port (the renumbered agent's rates are 4x apart) or a dropped 32-bit wrap (+34 Gb/s
# on a port of at most 2.4 Gb/s) is off by more.
PER_SAMPLE, SHARE_WITHIN, HARD_FACTOR = 0.15, 0.7, 3.0


def assert_samples(what: str, rows: list[dict], metric: str, truth: float) -> None:
    values = [r[metric] for r in rows]
    spans = [r[f"span_{metric}"] for r in rows]
    assert values, what
    got_bits, want_bits = sum(v * s for v, s in zip(values, spans, strict=True)), truth * sum(spans)
    assert close(got_bits, want_bits), (what, got_bits / sum(spans), truth)
    assert close(float(np.median(values)), truth, 0.1), (what, float(np.median(values)), truth)
    off = [round(v) for v in values if not close(v, truth, PER_SAMPLE)]
    assert len(off) <= (1 - SHARE_WITHIN) * len(values) + 1, f"{what}: {off} of {len(values)} off {truth}"
    assert all(truth / HARD_FACTOR - 1e3 <= v <= truth * HARD_FACTOR + 1e3 for v in values), f"{what}: {off}"


def write_state(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(path)


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[dict[str, tuple[Snmpd, Path]]]:
    started: dict[str, tuple[Snmpd, Path]] = {}
    try:
        for name, (state, _ports) in DEVICES.items():
            path = tmp_path / f"{name}.json"
            # The counters start on a half second, so the cache's refreshes fall between polls.
            write_state(path, {**state, "epoch": math.floor(time.time()) + 0.5})
            started[name] = (start_snmpd(tmp_path / name, iftable_ports=1, iftable_state=path), path)
        yield started
    finally:
        for agent, _ in started.values():
            agent.stop()


def fabric(name: str, agents: dict[str, tuple[Snmpd, Path]]) -> FabricSpec:
    switches = []
    for rail, (sw, (_state, ports)) in enumerate(DEVICES.items()):
        snmp = SnmpSettings(port=agents[sw][0].port, interval_s=1.0, timeout_s=0.4, retries=1)
        switches.append(SwitchSpec(sw, "leaf", rail, "127.0.0.1", snmp,
                                   tuple(PortSpec(i, n, s, "host") for n, i, s in ports)))
    return FabricSpec(name, tuple(switches))


def samples(records: list[PollRecord], spec: FabricSpec, after_ns: int = 0) -> dict[tuple[str, str], list[dict]]:
    """(switch, port name) → per successful sample after ``after_ns``: each metric and reason."""
    index = build_port_index(spec)
    out: dict[tuple[str, str], list[dict]] = {}
    for rec in records:
        part = rec.slice
        if not part.ok or rec.started_ns < after_ns:
            continue
        sl = index.slice_of(rec.switch)
        for k, port in enumerate(index.port_names[sl]):
            out.setdefault((rec.switch, port), []).append({
                **{m: float(v[k]) for m, v in part.metrics.items()},
                **{f"why_{m}": RateReason(int(v[k])).name.lower() for m, v in part.reasons.items()},
                **{f"span_{m}": float(b[k] - a[k]) / 1e9 for m, (a, b) in part.port_span_ns.items()},
            })
    return out


def close(value: float, truth: float, rel: float = 0.03) -> bool:
    return abs(value - truth) <= rel * truth + 1e3  # 1 kbit/s absolute for idle ports


def test_mixed_fleet_ports_by_name_right_rates_and_no_port_lost(agents, redis_url, redis_client, fabric_name,
                                                                  tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="fabricmon.telemetry")
    spec = fabric(fabric_name, agents)
    shard = plan_shards([spec], 16)[0].shard_id
    with run_collectors([spec], [shard], redis_url) as c:
        time.sleep(7.5)
        renum, path = agents["renum"]
        renum.stop()  # the agent reboots; its collector sees it down for a few polls
        write_state(path, {**RENUMBERED, "epoch": time.time()})
        time.sleep(2.5)
        agents["renum"] = (start_snmpd(tmp_path / "renum", iftable_ports=1, iftable_state=path,
                                       port=renum.port), path)
        restarted_ns = time.time_ns()
        time.sleep(6.5)
        health = live_window.read_health(redis_client, fabric_name)
    got = samples(c.records, spec)

    # Every topology port is there, by name, with rates: none lost for an optional cell.
    for (sw, port), (t_in, t_out) in TRUTH_BPS.items():
        rows = got[(sw, port)]
        if sw in ("renum", "cache"):
            continue  # judged below: after the restart, once the cache is seen
        if (sw, port) == ("legacy", "Hu0/10"):
            # 32-bit only at 100 Gb/s: 2**32 bytes take 0.34 s at line rate — withheld, with the reason.
            # On a loaded box a poll can also time out (a gap), or come < 0.34 s after the one before
            # (no second wrap possible, so the rate is drawn, and must then be right).
            whys = collections.Counter(r["why_in_bps"] for r in rows)
            assert whys["wrap_ambiguous"] >= 3 and set(whys) <= {"wrap_ambiguous", "gap", "ok"}, whys
            assert all(math.isnan(r["in_bps"]) for r in rows if r["why_in_bps"] != "ok"), rows
            assert all(close(r["in_bps"], t_in, PER_SAMPLE) for r in rows if r["why_in_bps"] == "ok"), rows
            continue
        ok = [r for r in rows if r["why_in_bps"] == "ok"]
        assert len(ok) >= 3, (sw, port, rows)
        assert_samples(f"{sw} {port} in", ok, "in_bps", t_in)
        assert_samples(f"{sw} {port} out", ok, "out_bps", t_out)

    # Speed: ifHighSpeed absent → ifSpeed (lagsw Ethernet1 runs at 1 G though the topology says 10 G);
    # ifSpeed saturated or 0 → the topology's (the 20 G LAG, the tunnel).
    def util(sw: str, port: str) -> float:
        return float(np.median([r["util"] for r in got[(sw, port)] if r["why_in_bps"] == "ok"]))

    assert abs(util("lagsw", "Ethernet1") - 0.4) < 0.02
    assert abs(util("lagsw", "Port-Channel1") - 0.8) < 0.03
    assert abs(util("legacy", "Tunnel1") - 8e6 / 10e9) < 1e-4
    assert abs(util("legacy", "Fa0/1") - 0.4) < 0.02  # ifSpeed 100 M beats the topology's 1 G

    # The LAG without ifInDiscards: only that metric of that port is a gap, and it says why.
    lag = got[("lagsw", "Port-Channel1")]
    assert all(math.isnan(r["in_discards_ps"]) and r["why_in_discards_ps"] == "no_cell" for r in lag)
    assert all(r["out_discards_ps"] == 0.0 for r in lag if r["why_in_bps"] == "ok")
    assert all(r["in_discards_ps"] == 0.0 for r in got[("lagsw", "Ethernet1")] if r["why_in_bps"] == "ok")
    assert "in_discards_ps: no_cell" in health["lagsw"]["port_notes"]["Port-Channel1"]
    assert "wrap_ambiguous" in health["legacy"]["port_notes"]["Hu0/10"]
    assert "wrap_ambiguous" in health["legacy"]["notes_text"]

    # The cache: reads that repeat the cached counters are flagged stale (not a 0, not a spike);
    # the others run between real updates and are right.
    # At first sight nothing is known to move, so the first refresh cycle reads 0, 0, then its
    # bytes in one interval (the documented price of never calling an idle switch stale); from the
    # first repeat of moving counters on, every sample is stale or right.
    cached = got[("cache", "Ethernet1")]
    whys = [r["why_in_bps"] for r in cached]
    first = whys.index("stale")
    assert first <= 4, whys
    seen = cached[first:]
    stale = [r for r in seen if r["why_in_bps"] == "stale"]
    ok = [r for r in seen if r["why_in_bps"] == "ok"]
    assert len(ok) >= 2 and len(stale) >= 2 * len(ok) - 2, whys
    assert all(math.isnan(r["in_bps"]) for r in stale)
    t_in, t_out = TRUTH_BPS[("cache", "Ethernet1")]
    assert_samples("cache Ethernet1 in", ok, "in_bps", t_in)
    assert_samples("cache Ethernet1 out", ok, "out_bps", t_out)
    assert_samples("cache Ethernet2 in", [r for r in got[("cache", "Ethernet2")][first:]
                                          if r["why_in_bps"] == "ok"], "in_bps", 80e6)

    # The renumbered agent: after its restart every port by name carries its own traffic again.
    after = samples(c.records, spec, after_ns=restarted_ns)
    for port in ("Ethernet1", "Ethernet2", "Ethernet3"):
        t_in, t_out = TRUTH_BPS[("renum", port)]
        ok = [r for r in after[("renum", port)] if r["why_in_bps"] == "ok"]
        assert len(ok) >= 3, (port, after[("renum", port)])
        assert_samples(f"renum {port} in", ok, "in_bps", t_in)
        assert_samples(f"renum {port} out", ok, "out_bps", t_out)
    assert health["renum"]["ports_remapped"] == {"Ethernet1": [1, 2], "Ethernet2": [2, 3], "Ethernet3": [3, 1]}

    # Health names the collector and its lease; every switch up, its last poll recent.
    for sw in DEVICES:
        h = health[sw]
        assert h["logged_state"] == "up" and h["up"] and h["collector"]["shard"] == shard, h
        assert h["collector"]["lease"] and ":" in h["collector"]["process"]
        assert time.time_ns() - h["last_poll_ns"] < 5 * 10**9

    # Every state change logged once, structured: renum went down (timeout) and came back up. (On a
    # loaded box a first poll may time out too: a switch never seen up is down from its first failure.)
    changes = [r for r in caplog.records if getattr(r, "event", "") == "switch_state"]
    for sw in DEVICES:
        states = [r.state for r in changes if r.switch == sw]
        assert states and states[-1] == "up", (sw, states)
        assert all(a != b for a, b in itertools.pairwise(states)), (sw, states)  # once per change
    renum_states = [r.state for r in changes if r.switch == "renum"]
    after_up = renum_states[renum_states.index("up") :]
    assert after_up == ["up", "down: timeout", "up"], renum_states
    down = [r for r in changes if r.switch == "renum" and r.state == "down: timeout"][-1]
    assert down.fabric == fabric_name and down.error and down.levelno == logging.WARNING and down.was == "up"
    assert any(getattr(r, "event", "") == "ifindex_remapped" and r.switch == "renum" for r in caplog.records)
