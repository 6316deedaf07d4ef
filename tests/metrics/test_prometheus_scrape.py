"""A real Prometheus scrapes ``/metrics`` of the running twin stack, and PromQL finds the twin's hot port.

    python -m twin ──SNMP/UDP──▶ shard collector ──frames──▶ Redis ◀── Daphne /metrics ◀── prometheus
                                                                        (Bearer token)       │ PromQL
    test: topk(1, transmit bytes/s) at a scrape ══ the twin's /hottest over that frame ◀─────┘
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from asgi_server import live_server
from prometheus_server import start_prometheus
from telemetry.telemetry_harness import TwinProcess, collector_spec, run_collectors

from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.yaml_dump import dump_fabric

pytestmark = pytest.mark.integration
TOKEN = "scrape-token-for-tests"


def get(url: str, token: str | None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_prometheus_scrapes_the_twin_and_finds_its_hot_port(redis_url, fabric_name, tmp_path: Path):
    twin = TwinProcess(fabric_name, tmp_path, servers=8, gpus_per_server=4, spines=2, seed=3)
    server = prom = None
    try:
        spec = collector_spec(twin.fabric, interval_s=1.0, timeout_s=0.3)
        index = build_port_index(spec)
        assert len(set(index.speed_bps.tolist())) == 1, "one line rate: transmit bytes/s ranks as utilization"
        (tmp_path / "server").mkdir()
        (tmp_path / "prom").mkdir()
        server = live_server(tmp_path / "server", redis_url, FABRICMON_METRICS_TOKEN=TOKEN)
        (tmp_path / "topology.yaml").write_text(dump_fabric(spec))
        server.manage("load_topology", str(tmp_path / "topology.yaml"))

        # The scrape token is checked before anything is read.
        assert get(f"{server.url}/metrics", None)[0] == 401
        status, body = get(f"{server.url}/metrics", "wrong")
        assert status == 401 and "wrong scrape token" in body

        with run_collectors([spec], [f"{fabric_name}:0"], redis_url):
            prom = start_prometheus(tmp_path / "prom", server.url.removeprefix("http://"), TOKEN)
            sel = f'{{fabric="{fabric_name}"}}'
            prom.wait_for(f"fabricmon_metrics_ports_exported{sel} > 0")
            # Detection once, as beat runs it, so the incast state is there to scrape.
            server.manage("shell", "-c", "from fabricmon.alerts.evaluation import evaluate_all; evaluate_all()")

            # Every switch's collector is up, as Prometheus scraped it.
            up = prom.wait_for(f"fabricmon_collector_up{sel} == 1")
            deadline = time.monotonic() + 30
            while len(up) < len(spec.switches) and time.monotonic() < deadline:
                time.sleep(1)
                up = prom.query(f"fabricmon_collector_up{sel} == 1")
            assert sorted(s["metric"]["switch"] for s in up) == sorted(sw.name for sw in spec.switches)
            prom.wait_for(f"fabricmon_incast_hot_ports{sel}")
            prom.wait_for(f'fabricmon_alerts{{fabric="{fabric_name}",kind="moving_incast",state="firing"}}')

            # promtool's lint of one real scrape: clean.
            status, text = get(f"{server.url}/metrics", TOKEN)
            assert status == 200
            lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                                  text=True, timeout=60, check=False)
            assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), (
                lint.stdout + lint.stderr)

            # The hot port: PromQL at a scrape against the twin's truth for the frame that scrape saw.
            # The hotspot moves, so only scrapes where the twin's answer holds still around the frame
            # are judged (as tests/e2e/test_full_stack.py does for the heatmap).
            time.sleep(6)
            judged = 0
            now = time.time()
            for back_s in np.arange(1.0, 6.0, 0.5):
                at = now - back_s
                top = prom.query(f"topk(1, fabricmon_port_transmit_bytes_per_second{sel})", at)
                ts = prom.query(f"fabricmon_frame_timestamp_seconds{sel}", at)
                interval = prom.query(f"fabricmon_frame_interval_seconds{sel}", at)
                if not (top and ts and interval):
                    continue
                t2 = round(float(ts[0]["value"][1]) * 1e9)
                t1 = t2 - round(float(interval[0]["value"][1]) * 1e9)
                hot = twin._call("GET", "/hottest", t1_ns=t1, t2_ns=t2)
                wider = twin._call("GET", "/hottest", t1_ns=t1 - 500_000_000, t2_ns=t2 + 500_000_000)
                if (hot["switch"], hot["ifindex"]) != (wider["switch"], wider["ifindex"]):
                    continue
                labels = top[0]["metric"]
                pos = index.position(hot["switch"], hot["ifindex"])
                assert (labels["switch"], labels["port"]) == (hot["switch"], index.port_names[pos]), (labels, hot)
                host, gpu, _nic = hot["peer"].split()
                assert (labels["peer_host"], labels["peer_gpu"]) == (host, gpu), (labels, hot)
                assert labels["role"] == "downlink" and labels["rail"] == str(int(index.rail[pos]))
                judged += 1
            assert judged >= 1, "the twin's hottest port never held still around a scraped frame"
    finally:
        if prom is not None:
            prom.stop()
        if server is not None:
            server.forget_fabric(fabric_name)
            server.stop()
        twin.stop()
