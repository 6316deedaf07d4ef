"""A moving incast drawn on the live fabric heatmap in headless Chromium (real Daphne, real Redis,
real detection): frames whose hot port hops between leaves every second go through the alerts
evaluation the beat runs; the moving-incast alert fires, and the heatmap shows its trajectory
(rings on the hot cells at each migration, joined by a line) and a banner naming it — without a
reload, while the heatmap keeps streaming.

Screenshot: test-output/live-moving-incast.png."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from test_fabric_page import Feeder, wait_js

from fabricmon.base import keys
from fabricmon.core.detection.config import DetectConfig
from fabricmon.core.telemetry.frames import Frame
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.yaml_dump import dump_fabric
from tests.topologies import four_leaf_two_spine

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

EVALUATE = """
import time
from fabricmon.alerts.evaluation import evaluate_fabric
end = time.monotonic() + {seconds}
while time.monotonic() < end:
    evaluate_fabric({fabric!r})
    time.sleep(0.3)
"""


class MovingFeeder(Feeder):
    """The hot port hops to another leaf every ``hop_frames`` frames, with queue pressure on it."""

    def __init__(self, r, fabric: str, index, hops: list[int], hop_frames: int = 2) -> None:
        super().__init__(r, fabric, index, hops[0])
        self.hops, self.hop_frames, self.count = hops, hop_frames, 0

    def frame(self, ts_ns: int) -> Frame:
        self.hot = self.hops[(self.count // self.hop_frames) % len(self.hops)]
        self.count += 1
        f = super().frame(ts_ns)
        wm = np.full(len(self.index), 0.05 * DetectConfig().watermark_kmax_bytes, np.float32)
        wm[self.hot] = 3 * DetectConfig().watermark_kmax_bytes
        return Frame(f.fabric, f.topology_version, f.ts_ns, f.interval_s, {**f.metrics, "watermark_bytes": wm})


@pytest.fixture
def moving_fabric(daphne_server, redis_client, fabric_name, tmp_path):
    spec = four_leaf_two_spine(fabric_name, servers=8)
    (tmp_path / "topology.yaml").write_text(dump_fabric(spec))
    daphne_server.manage("load_topology", str(tmp_path / "topology.yaml"))
    index = build_port_index(spec)
    hops = [index.position("leaf-r0", 1), index.position("leaf-r2", 3), index.position("leaf-r1", 6)]
    feeder = MovingFeeder(redis_client, fabric_name, index, hops)
    feeder.start()
    yield spec, hops
    feeder.stop.set()
    feeder.join()
    daphne_server.forget_fabric(fabric_name)
    redis_client.delete(keys.frames(fabric_name), keys.alerts_cursor(fabric_name), keys.alerts_state(fabric_name))


def test_moving_incast_trajectory_and_banner_appear_on_the_live_heatmap(
    page, daphne_server, moving_fabric, fabric_name, log_in, screenshot
) -> None:  # type: ignore[no-untyped-def]
    _spec, hops = moving_fabric
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    log_in(f"/fabric/{fabric_name}/?window=60")
    wait_js(page, "window.fabricmon.state.columns > 2")
    assert page.evaluate("window.fabricmon.incidents.messages") == 0  # a quiet fabric: nothing sent
    assert page.locator("#incidents").is_hidden()

    evaluator = threading.Thread(
        target=daphne_server.manage, args=("shell", "-c", EVALUATE.format(seconds=20, fabric=fabric_name)),
        daemon=True)
    evaluator.start()
    steps = wait_js(page, "Number(document.getElementById('incident-overlay').dataset.steps || 0) >= 3 && "
                          "Number(document.getElementById('incident-overlay').dataset.steps)", timeout_s=40)
    assert steps >= 3
    banner = page.locator("#incidents").inner_text()
    assert "MOVING INCAST" in banner and "migration" in banner and "culprit: unknown" in banner
    assert page.locator("#incidents a").get_attribute("href").startswith("/alerts/episodes/")
    # rings drawn on the hops' rows: the overlay's ring colour sits on each hot port's row
    drawn = wait_js(page, "Number(document.getElementById('incident-overlay').dataset.drawn)")
    assert drawn >= 3
    rows_with_rings = page.evaluate(
        """(hops) => { const c = document.getElementById('incident-overlay'), ctx = c.getContext('2d');
           const h = window.fabricmon.heatmap;
           return hops.map((p) => { const r = h.portRow[p];
             const y = Math.round((h.rowToY(r) + h.rowToY(r + 1)) / 2);
             const d = ctx.getImageData(0, Math.max(0, y - 8), c.width, 17).data; let n = 0;
             for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0) n++;
             return n; }); }""",
        hops,
    )
    assert all(n > 0 for n in rows_with_rings), rows_with_rings
    # the heatmap kept streaming while the overlay updated
    before = page.evaluate("window.fabricmon.state.columns")
    wait_js(page, f"window.fabricmon.state.columns > {before + 1}")
    screenshot("live-moving-incast")
    evaluator.join(timeout=60)
    assert not errors, errors
