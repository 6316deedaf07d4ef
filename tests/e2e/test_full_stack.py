"""The whole product in a real browser: twin (own process, real UDP SNMP agents) → Celery collector
worker → Redis live window → Daphne/Channels → headless Chromium.

    python -m twin ──SNMP/UDP──▶ celery worker (collect_shard) ──XADD──▶ Redis ──XREAD──▶ consumer
                                                                                    │ WebSocket
    test ◀── window.fabricmon (the data the page draws), tooltip text ◀── Chromium ◀─┘
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.yaml_dump import dump_fabric
from fabricmon.core.topology.yaml_load import load_fabric

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]


class TwinProcess:
    """``python -m twin`` on ephemeral ports; ground truth through its HTTP control API."""

    def __init__(self, name: str, workdir: Path) -> None:
        topo = workdir / "twin.yaml"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "twin", "--name", name, "--servers", "8", "--gpus-per-server", "4",
             "--spines", "2", "--seed", "3", "--snmp-port-base", "0", "--control-port", "0",
             "--write-topology", str(topo)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        match = re.search(r"control (http://127\.0\.0\.1:\d+)/", line)
        if not match:
            self.stop()
            raise AssertionError(f"twin did not start: {line}")
        self.control = match.group(1)
        self.spec = load_fabric(topo.read_text(), source=str(topo))

    def get(self, path: str, **params: object) -> dict:
        with urllib.request.urlopen(f"{self.control}{path}?{urllib.parse.urlencode(params)}", timeout=10) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture
def twin_and_collectors(daphne_server, fabric_name, tmp_path):
    twin = TwinProcess(fabric_name, tmp_path)
    worker = None
    try:
        # Collector timing as an operator would set it for 1 s polls; stored like any topology.
        spec = replace(twin.spec, switches=tuple(
            replace(sw, snmp=replace(sw.snmp, interval_s=1.0, timeout_s=0.3, retries=1)) for sw in twin.spec.switches))
        (tmp_path / "topology.yaml").write_text(dump_fabric(spec))
        daphne_server.manage("load_topology", str(tmp_path / "topology.yaml"))
        # A real Celery worker on a queue of its own (parallel tests share the Redis broker).
        queue = f"e2e-{uuid.uuid4().hex[:8]}"
        env = {**daphne_server.env, "FABRICMON_COLLECTOR_QUEUE": queue}
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "fabricmon.celery", "worker", "-Q", queue,
             "--concurrency", "1", "--loglevel", "INFO", "--without-gossip", "--without-mingle",
             "-n", f"{queue}@%h"],
            cwd=ROOT, env=env, stdout=(tmp_path / "worker.log").open("ab"), stderr=subprocess.STDOUT,
        )
        # Enqueue only once the worker has bound its queue (a message to an unbound queue is lost).
        deadline = time.monotonic() + 60
        while "ready." not in (tmp_path / "worker.log").read_text():
            assert worker.poll() is None and time.monotonic() < deadline, (tmp_path / "worker.log").read_text()
            time.sleep(0.2)
        # What beat does every few seconds: hand every free shard to a collector.
        done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "shell", "-c",
                               "import fabricmon.celery; "
                               "from fabricmon.telemetry.tasks import ensure_collectors; print(ensure_collectors())"],
                              env=env, cwd=ROOT, capture_output=True, timeout=60, check=False)
        assert done.returncode == 0 and fabric_name in done.stdout.decode(), done.stdout + done.stderr
        yield twin, spec
    finally:
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(15)
            except subprocess.TimeoutExpired:
                worker.kill()
        twin.stop()
        daphne_server.forget_fabric(fabric_name)


def test_live_heatmap_of_the_twin(page, daphne_server, twin_and_collectors, fabric_name, log_in, screenshot):
    twin, spec = twin_and_collectors
    index = build_port_index(spec)
    log_in(f"/fabric/{fabric_name}/")
    page.wait_for_url(f"**/fabric/{fabric_name}/")
    page.wait_for_function("window.fabricmon && window.fabricmon.heatmap.nPorts > 0", timeout=60_000)

    # One row per port of the topology once idle rows are shown (collapsed by default, issue 16).
    page.click("#idle-toggle")
    page.wait_for_function(f"fabricmon.heatmap.rowCount() === {len(index)}", timeout=10_000)
    assert page.evaluate("fabricmon.state.layout.n_ports") == len(index)

    # New columns arrive over the WebSocket (one per collector frame).
    page.wait_for_function("fabricmon.state.columns >= 1", timeout=60_000)
    first = page.evaluate("fabricmon.state.columns")
    page.wait_for_function(f"fabricmon.state.columns >= {first + 3}", timeout=30_000)

    # The twin's hottest port over a column's interval is the highest of its rail in that column.
    # Pick a column where the twin's answer is stable around the interval (the hotspot moves).
    checked = 0
    for age in range(1, 4):
        ts_ms, codes = page.evaluate(
            f"[fabricmon.heatmap.slotTs[(fabricmon.heatmap.head - {age} + fabricmon.heatmap.nCols) % fabricmon.heatmap.nCols],"
            f" Array.from(fabricmon.heatmap.column({age}))]")
        t2 = int(ts_ms * 1e6)
        hot = twin.get("/hottest", t1_ns=t2 - 1_000_000_000, t2_ns=t2)
        wider = twin.get("/hottest", t1_ns=t2 - 1_500_000_000, t2_ns=t2 + 500_000_000)
        if (hot["switch"], hot["ifindex"]) != (wider["switch"], wider["ifindex"]):
            continue
        pos = index.position(hot["switch"], hot["ifindex"])
        codes = np.asarray(codes)
        rail = np.flatnonzero(index.rail == index.rail[pos])
        drawn = np.where(codes[rail] == 255, -1, codes[rail])
        assert codes[pos] != 255, "the twin's hottest port has no data on the page"
        assert codes[pos] == drawn.max(), (hot, index.port_names[rail[np.argmax(drawn)]], drawn.max(), codes[pos])
        checked += 1
        break
    assert checked == 1, "the twin's hottest port never held still for one interval"

    # Hover the hottest port at that column: the tooltip names the twin's peer for it.
    page.evaluate(f"fabricmon.jumpTo({pos})")
    box = page.locator("#heatmap").bounding_box()
    y = page.evaluate(f"(h => (h.rowToY(h.portRow[{pos}]) + h.rowToY(h.portRow[{pos}] + 1)) / 2)(fabricmon.heatmap)")
    page.mouse.move(box["x"] + box["width"] - 2, box["y"] + y)
    tooltip = page.locator("#tooltip")
    tooltip.wait_for(state="visible")
    assert hot["peer"] and hot["peer"] in tooltip.inner_text()
    screenshot("fabric-twin-hover")
    page.dblclick("#heatmap")
    page.mouse.move(0, 0)
    screenshot("fabric-twin-overview")

    # The collectors' health, at a glance: every switch of the twin polled and up.
    page.goto(f"{daphne_server.url}/fabric/{fabric_name}/switches/")
    page.wait_for_function(f"document.querySelectorAll('#health-rows tr').length === {len(spec.switches)}")
    states = page.locator("#health-rows .state").all_inner_texts()
    assert states == ["up"] * len(spec.switches), states
    # who polls each switch and how, from the collectors' health and the shard's lease in Redis
    page.wait_for_function("Number(document.getElementById('switches-view').dataset.refreshed || 0) >= 2")
    cells = {k: page.locator(f"#health-rows td.{k}").all_inner_texts()
             for k in ("protocol", "collector", "lease", "errors", "last-error", "poll-ms", "last-sample")}
    assert set(cells["protocol"]) == {"SNMP v2c"}, cells["protocol"]
    assert all(re.fullmatch(r"[\w.-]+:\d+", c) for c in cells["collector"]), cells["collector"]
    assert all(re.match(r"shard \S+ · lease held · ", c) for c in cells["lease"]), cells["lease"]
    assert all(re.match(r"\d[\d,]* of [\d,]+ polls", c) for c in cells["errors"]), cells["errors"]
    assert all(re.fullmatch(r"[\d.]+ ms", c) for c in cells["poll-ms"]), cells["poll-ms"]
    # errors and the last error agree: a switch shows "none" only where it counted no error
    for errs, last in zip(cells["errors"], cells["last-error"], strict=True):
        assert (last == "none") == errs.startswith("0 of"), (errs, last)
    assert "newest fabric frame" in page.inner_text("#summary")
    screenshot("switches-twin")
