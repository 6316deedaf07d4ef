"""gNMI in the shard loop: the twin's real gRPC targets → run_shard → frames in the real Redis.

    Twin(gnmi=True): leaf-r0..r3 + spine0..1, gNMI and SNMP on loopback
    run_shard(protocols: leaves "gnmi", leaf-r3 "both", spines "snmp")
      └─ one GnmiCollector (one Subscribe per gNMI switch) + SNMP loops ─▶ FabricFramer ─▶ live window
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import numpy as np
import pytest

from fabricmon.telemetry import event_loop, live_window, services
from fabricmon.telemetry.framing import FabricFramer
from fabricmon.telemetry.shard_loop import PollRecord
from twin.cluster import Twin
from twin.config import TwinConfig
from twin.moe import MoeConfig

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
INTERVAL_S = 0.5
JOB = MoeConfig(attention_ms=10.0, expert_ms=20.0, step_gap_ms=300.0, regime_shift_prob=0.0)


def test_shard_collects_gnmi_switches_into_frames_with_queue_metrics(redis_url, fabric_name, settings) -> None:
    settings.FABRICMON_SHARD_SIZE = 16  # one shard
    with Twin(TwinConfig(name=fabric_name, servers=4, gpus_per_server=4, spines=2, gnmi=True, job=JOB,
                         seed=1)) as tw:
        spec = replace(tw.fabric, switches=tuple(
            replace(sw, snmp=replace(sw.snmp, interval_s=INTERVAL_S, timeout_s=0.12, retries=1))
            for sw in tw.fabric.switches))
        protocols = {sw.name: "gnmi" if sw.role == "leaf" else "snmp" for sw in spec.switches}
        protocols["leaf-r3"] = "both"
        records: list[PollRecord] = []
        th, stop, errors = _collect(fabric_name, spec, redis_url, protocols, records.append)
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:  # bounded wait, not a timing assert
                ok = [r for r in list(records) if r.switch == "leaf-r0" and r.slice.ok]
                if len(ok) >= 4:
                    break
                time.sleep(0.1)
        finally:
            stop.set()
            th.join(15)
        assert not errors, errors
        assert tw.gnmi is not None
        streams = {n: sv.max_active_streams for n, sv in tw.gnmi.servicers.items()}
        assert streams == {n: 1 if p in ("gnmi", "both") else 0 for n, p in protocols.items()}
        r = live_window.connect(redis_url)
        frames = [f for _, f in live_window.read_window(r, fabric_name)]
        health = live_window.read_health(r, fabric_name)
        r.close()

        # every gNMI slice of leaf-r0 against the twin's truth at the device timestamps
        gnmi_ok = [rec for rec in records if rec.switch == "leaf-r0" and rec.slice.ok]
        assert len(gnmi_ok) >= 4
        for rec in gnmi_ok:
            t1, t2 = rec.slice.t_prev_ns, rec.slice.t_cur_ns
            assert t1 is not None
            truth = tw.true_rates("leaf-r0", t1, t2)
            np.testing.assert_allclose(rec.slice.metrics["out_bps"], truth["out_octets_per_s"] * 8,
                                       rtol=0.01, atol=100.0)
            a, b = tw.true_queue("leaf-r0", t1), tw.true_queue("leaf-r0", t2)
            ecn = (b["q_ecn_marked_pkts"] - a["q_ecn_marked_pkts"]).astype(np.float64)
            np.testing.assert_array_equal(
                np.round(rec.slice.metrics["ecn_marked_ps"].astype(np.float64) * (t2 - t1) / 1e9), ecn)

    framer = FabricFramer(spec, window_s=60)
    assert frames, "no frames built"
    have = [f for f in frames if "ecn_marked_ps" in f.metrics]
    assert have, "no frame carries the gNMI metrics"
    last = have[-1]
    for m in ("ecn_marked_ps", "pfc_pause_ps", "pfc_paused_fraction", "watermark_bytes", "drops_ps"):
        assert m in last.metrics
    leaf0, spine0 = framer.slices["leaf-r0"], framer.slices["spine0"]
    assert np.isfinite(last.metrics["watermark_bytes"][leaf0]).all()
    assert np.isnan(last.metrics["watermark_bytes"][spine0]).all()  # SNMP switch: no queue data
    assert np.isfinite(last.metrics["out_bps"][spine0]).all()
    # health: gNMI switches report like SNMP ones, with their session; one subscription each
    h = health["leaf-r0"]
    assert h["up"] and h["gnmi"]["protocol"] == "gnmi" and h["gnmi"]["reconnects"] == 0
    assert h["gnmi"]["updates"] > 0
    assert "gnmi" in health["leaf-r3"] and health["leaf-r3"]["polls"] > 0  # both: SNMP health + gNMI
    assert "gnmi" not in health["spine0"]
    assert tw.gnmi is None  # the twin stopped its targets with it


def test_under_both_every_tick_has_data_on_every_switch(redis_url, fabric_name, settings) -> None:
    """gNMI samples twice a tick, and a tick its stream left without a sample is filled by that
    tick's SNMP poll: after the first ticks (baselines), no frame has a "both" switch without data —
    before, a once-a-tick stream at an arbitrary phase left about half the frames empty under load."""
    settings.FABRICMON_SHARD_SIZE = 16
    with Twin(TwinConfig(name=fabric_name, servers=4, gpus_per_server=4, spines=2, gnmi=True, job=JOB,
                         seed=2)) as tw:
        spec = replace(tw.fabric, switches=tuple(
            replace(sw, snmp=replace(sw.snmp, interval_s=INTERVAL_S, timeout_s=0.2, retries=1))
            for sw in tw.fabric.switches))
        protocols = {sw.name: "both" if sw.role == "leaf" else "snmp" for sw in spec.switches}
        th, stop, errors = _collect(fabric_name, spec, redis_url, protocols)
        r = live_window.connect(redis_url)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and live_window.length(r, fabric_name) < 24:  # bounded wait
                time.sleep(0.2)
        finally:
            stop.set()
            th.join(15)
        frames = [f for _, f in live_window.read_window(r, fabric_name)]
        r.close()
    assert not errors, errors
    framer = FabricFramer(spec, window_s=60)
    settled = frames[4:]
    assert len(settled) >= 15, len(frames)
    # the "both" leaves (an SNMP-only spine may still have one late cell on a loaded machine: by design)
    leaves = {sw: sl for sw, sl in framer.slices.items() if protocols[sw] == "both"}
    empty = [(frames.index(f), sw) for f in settled for sw, sl in leaves.items()
             if not np.isfinite(f.metrics["out_bps"][sl]).all()]
    assert not empty, f"{len(empty)} switch-ticks without data in {len(settled)} frames: {empty[:5]}"
    with_queue = [f for f in settled if "watermark_bytes" in f.metrics
                  and np.isfinite(f.metrics["watermark_bytes"][framer.slices["leaf-r0"]]).all()]
    assert len(with_queue) >= 0.8 * len(settled)  # gNMI gave most ticks; SNMP only filled gaps


def _collect(fabric_name, spec, redis_url, protocols, observer=None):  # type: ignore[no-untyped-def]
    """The shard collected on a thread until ``stop`` is set; its exceptions end up in ``errors``."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            services.run_shard(f"{fabric_name}:0", lease_s=30, stop_event=stop, fabrics=[spec],
                               redis_url=redis_url, observer=observer, history=False, protocols=protocols)
        except BaseException as exc:
            errors.append(exc)
        finally:
            event_loop.close_event_loop()

    th = threading.Thread(target=work)
    th.start()
    return th, stop, errors
