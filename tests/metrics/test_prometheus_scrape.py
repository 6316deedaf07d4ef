"""A real Prometheus scrapes ``/metrics`` of the running twin stack, and PromQL finds the twin's hot port.

    python -m twin ──SNMP/UDP──▶ shard collector ──frames──▶ Redis ◀── Daphne /metrics ◀── prometheus
                                                                        (Bearer token)       │ PromQL
    test: topk(1, transmit bytes/s) at a scrape ══ the twin's /hottest over that frame ◀─────┘
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import redis
from asgi_server import live_server
from prometheus_server import start_prometheus
from telemetry.telemetry_harness import TwinProcess, collector_spec, run_collectors

from fabricmon.base import keys
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.yaml_dump import dump_fabric

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TOKEN = "scrape-token-for-tests"
SETUP = """
from django.contrib.auth import get_user_model
from fabricmon.jobs.runs import create_run
from fabricmon.jobs.tokens import issue_token
user = get_user_model().objects.create_user("metrics-job")
print(repr((create_run(user, "metrics-run", world_size=4).pk, issue_token(user, "m")[1])))
"""
T0 = 1_795_987_668_367_402_543


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a scrape (0 when absent)."""
    for line in text.splitlines():
        m = re.match(rf"{name}{{(.*)}} (\S+)$", line)
        if m and all(f'{k}="{v}"' in m.group(1) for k, v in labels.items()):
            return float(m.group(2))
    return 0.0


def post_events(url: str, run: int, token: str, lines: list[bytes]) -> int:
    req = urllib.request.Request(f"{url}/jobs/api/runs/{run}/events", data=b"\n".join(lines), method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def get(url: str, token: str | None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def twin_top(twin: TwinProcess, t1: int, t2: int) -> tuple[str, str, str] | None:
    """The twin's hottest egress port over [t1, t2] (switch, port, peer) when it is clearly the
    hottest (20 % above the next), from its ground truth."""
    truth = twin._call("GET", "/truth", t1_ns=t1, t2_ns=t2)
    out = np.asarray(truth["out_octets_per_s"])
    first, second = np.argsort(out)[::-1][:2]
    if out[first] < 1.2 * out[second]:
        return None
    return truth["switch"][first], truth["port_name"][first], truth["peer"][first]


def index_of(spec, switch: str, port: str) -> int:  # type: ignore[no-untyped-def]
    sw = next(s for s in spec.switches if s.name == switch)
    return next(p.ifindex for p in sw.ports if p.name == port)


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

            # Ingest counters are shared totals (Redis), whichever process stored the events: two
            # good lines and one bad one are counted as such (other tests may add to them too).
            run, job_token = ast.literal_eval(server.manage("shell", "-c", SETUP).strip().splitlines()[-1])
            before = get(f"{server.url}/metrics", TOKEN)[1]
            good = [json.dumps({"id": f"m{i}", "rank": i, "step": 0, "layer": 1, "phase": "dispatch",
                                "start_ns": T0 + i, "end_ns": T0 + i + 1000, "source": "probe"}).encode()
                    for i in range(2)]
            assert post_events(server.url, run, job_token, [good[0], b'{"id": "bad", "rank": "x"}', good[1]]) == 422
            for outcome, n in (("stored", 2), ("rejected", 1)):
                want = sample(before, "fabricmon_ingest_events_total", path="api", outcome=outcome) + n
                prom.wait_for(f'fabricmon_ingest_events_total{{path="api",outcome="{outcome}"}} >= {want}')

            # promtool's lint of one real scrape: clean.
            status, text = get(f"{server.url}/metrics", TOKEN)
            assert status == 200
            lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                                  text=True, timeout=60, check=False)
            assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), (
                lint.stdout + lint.stderr)

            # The hot port: PromQL at a scrape against the twin's truth for the frame that scrape saw.
            # The hotspot moves, so only frames where the twin has one clear hottest port that holds
            # still around the frame are judged (as tests/e2e/test_full_stack.py does for the heatmap).
            judged: set[int] = set()
            seen: list[str] = []
            for _round in range(4):  # up to 40 s of scrapes until one frame can be judged
                time.sleep(10)
                now = time.time()
                for back_s in range(1, 11):
                    at = now - back_s
                    top = prom.query(f"topk(1, fabricmon_port_transmit_bytes_per_second{sel})", at)
                    ts = prom.query(f"fabricmon_frame_timestamp_seconds{sel}", at)
                    interval = prom.query(f"fabricmon_frame_interval_seconds{sel}", at)
                    if not (top and ts and interval):
                        seen.append(f"{at:.0f}: no sample")
                        continue
                    t2 = round(float(ts[0]["value"][1]) * 1e9)
                    t1 = t2 - round(float(interval[0]["value"][1]) * 1e9)
                    if t2 in judged:
                        continue
                    hot = twin_top(twin, t1, t2)
                    if hot is None or hot != twin_top(twin, t1 - 500_000_000, t2 + 500_000_000):
                        seen.append(f"{t2}: {hot} not clear or moving")
                        continue
                    labels = top[0]["metric"]
                    switch, port, peer = hot
                    pos = index.position(switch, index_of(spec, switch, port))
                    assert (labels["switch"], labels["port"]) == (switch, port), (labels, hot)
                    host, gpu, _nic = peer.split()
                    assert (labels["peer_host"], labels["peer_gpu"]) == (host, gpu), (labels, hot)
                    assert labels["role"] == "downlink" and labels["rail"] == str(int(index.rail[pos]))
                    judged.add(t2)
                if judged:
                    break
            assert judged, f"the twin's hottest port never held still around a scraped frame: {seen}"

            # Every query of the shipped Grafana dashboard runs on the scraped data; the panels an
            # operator opens it for show something.
            dashboard = json.loads((ROOT / "docs" / "grafana-fabricmon.json").read_text())
            shown = {}
            for panel in dashboard["panels"]:
                for target in panel["targets"]:
                    expr = target["expr"].replace("$fabric", fabric_name).replace("$__rate_interval", "1m")
                    shown[panel["title"]] = bool(prom.query(expr))
            must_show = ["Hottest ports (utilization)", "Hot set size (moving incast)", "Incast alerts firing",
                         "Frame age", "Collector up per switch", "Poll duration per switch",
                         "Ingest rate (phase events/s)", "Celery queue depth"]
            assert all(shown[title] for title in must_show), shown
    finally:
        if prom is not None:
            prom.stop()
        if server is not None:
            server.forget_fabric(fabric_name)
            server.stop()
        with redis.Redis.from_url(redis_url) as r:  # the window and health this test's collector left
            r.delete(keys.frames(fabric_name), keys.health(fabric_name), keys.alerts_state(fabric_name),
                     keys.alerts_cursor(fabric_name))
        twin.stop()
