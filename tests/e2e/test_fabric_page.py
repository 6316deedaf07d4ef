"""The fabric page in headless Chromium, fed by frames appended to the live window (real Redis,
real Daphne). The full stack with twin and collectors is tests/e2e/test_full_stack.py."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from fabricmon.base import keys
from fabricmon.core.telemetry.frames import Frame
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.yaml_dump import dump_fabric
from fabricmon.telemetry import live_window
from tests.topologies import four_leaf_two_spine

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


class Feeder(threading.Thread):
    """Appends a frame every ``interval_s`` with one hot port (``hot``), a few no-data ports."""

    def __init__(self, r, fabric: str, index, hot: int, interval_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.r, self.fabric, self.index, self.hot, self.interval_s = r, fabric, index, hot, interval_s
        self.stop = threading.Event()
        self.rng = np.random.default_rng(7)

    def frame(self, ts_ns: int) -> Frame:
        n = len(self.index)
        util = self.rng.uniform(0.05, 0.3, n).astype(np.float32)
        util[self.hot] = 0.93
        util[n - 1] = np.nan  # a stale switch port: must be drawn as no data
        return Frame(self.fabric, self.index.version, ts_ns, self.interval_s,
                     {"util": util, "out_bps": (util * self.index.speed_bps).astype(np.float32)})

    def run(self) -> None:
        # Like the collectors: one frame per tick, stamped with the tick (a multiple of the interval).
        step = int(self.interval_s * 1e9)
        tick = time.time_ns() // step * step
        while not self.stop.is_set():
            tick += step
            self.stop.wait(max(0.0, (tick - time.time_ns()) / 1e9))
            live_window.append(self.r, self.frame(tick), max_frames=600)


@pytest.fixture
def fed_fabric(daphne_server, redis_client, fabric_name, tmp_path):
    spec = four_leaf_two_spine(fabric_name, servers=16)
    (tmp_path / "topology.yaml").write_text(dump_fabric(spec))
    daphne_server.manage("load_topology", str(tmp_path / "topology.yaml"))
    index = build_port_index(spec)
    hot = index.position("leaf-r2", 5)  # node005's GPU 2
    feeder = Feeder(redis_client, fabric_name, index, hot)
    feeder.start()
    yield spec, index, hot
    feeder.stop.set()
    feeder.join()
    daphne_server.forget_fabric(fabric_name)
    redis_client.delete(keys.frames(fabric_name))


def wait_js(page, expr: str, timeout_s: float = 20.0):
    page.wait_for_function(expr, timeout=timeout_s * 1000)
    return page.evaluate(expr)


def test_fabric_page_streams_one_row_per_port_and_names_the_peer(page, daphne_server, fed_fabric, fabric_name, log_in, screenshot):
    _, index, hot = fed_fabric
    log_in(f"/fabric/{fabric_name}/")
    page.wait_for_url(f"**/fabric/{fabric_name}/")
    wait_js(page, "window.fabricmon && window.fabricmon.state.columns >= 1")

    assert page.evaluate("fabricmon.heatmap.rowCount()") == len(index)
    assert page.evaluate("fabricmon.heatmap.nPorts") == len(index)
    before = page.evaluate("fabricmon.state.columns")
    wait_js(page, f"fabricmon.state.columns >= {before + 2}")  # columns keep arriving over the socket

    # In the data the page draws, the hot port is the highest of its rail; no data stays no data.
    newest = page.evaluate("Array.from(fabricmon.heatmap.column(0))")
    codes = np.array(newest)
    rail = index.rail[hot]
    in_rail = np.flatnonzero(index.rail == rail)
    assert in_rail[np.argmax(np.where(codes[in_rail] == 255, -1, codes[in_rail]))] == hot
    assert codes[-1] == 255

    # Hover the hot port's row at the right edge: the tooltip names its peer.
    page.evaluate(f"fabricmon.jumpTo({hot})")
    box = page.locator("#heatmap").bounding_box()
    y = page.evaluate(f"(fabricmon.heatmap.rowToY(fabricmon.heatmap.portRow[{hot}]) + fabricmon.heatmap.rowToY(fabricmon.heatmap.portRow[{hot}] + 1)) / 2")
    page.mouse.move(box["x"] + box["width"] - 2, box["y"] + y)
    tooltip = page.locator("#tooltip")
    tooltip.wait_for(state="visible")
    assert "node005 gpu2 mlx5_2" in tooltip.inner_text()
    assert "leaf-r2:Ethernet5" in tooltip.inner_text()
    screenshot("fabric-synthetic-hover")


def test_search_jumps_to_a_host_gpu(page, daphne_server, fed_fabric, fabric_name, log_in, screenshot):
    _, index, _ = fed_fabric
    log_in(f"/fabric/{fabric_name}/")
    wait_js(page, "window.fabricmon && window.fabricmon.state.columns >= 1")
    page.click("#collapse-all")
    assert page.evaluate("fabricmon.heatmap.rowCount()") == len(index.switch_names)
    page.fill("#search-input", "node012 gpu3")
    page.locator("#search-results li").first.wait_for()
    page.keyboard.press("Enter")
    target = index.position("leaf-r3", 12)
    assert page.evaluate("fabricmon.state.highlight") == target
    # its leaf expanded again; the others stay collapsed
    assert len(index.switch_names) < page.evaluate("fabricmon.heatmap.rowCount()") < len(index)
    screenshot("fabric-synthetic-search")


def test_pages_require_login_and_port_and_switch_pages_render(page, daphne_server, fed_fabric, fabric_name, log_in, screenshot):
    _, index, hot = fed_fabric
    page.goto(f"{daphne_server.url}/fabric/{fabric_name}/")
    assert "/accounts/login/" in page.url
    log_in(f"/fabric/{fabric_name}/port/{hot}/")
    page.wait_for_selector("#chart-util .main-svg", timeout=20000)
    assert "node005 gpu2 mlx5_2" in page.locator("#peer").inner_text()
    screenshot("port-detail")
    page.goto(f"{daphne_server.url}/fabric/{fabric_name}/switches/")
    page.wait_for_selector("#health-rows tr")
    assert page.locator("#health-rows tr").count() == len(index.switch_names)
    screenshot("switches")


def test_reconnects_and_resynchronises_and_pauses_when_hidden(page, daphne_server, fed_fabric, fabric_name, log_in):
    _, index, hot = fed_fabric
    log_in(f"/fabric/{fabric_name}/")
    wait_js(page, "window.fabricmon && window.fabricmon.state.columns >= 1")
    # A dropped connection (any code but a refusal): reconnect with backoff, fresh hello + window.
    page.evaluate("window.__firstHello = fabricmon.state.hello; fabricmon.state.ws.close(4000)")
    wait_js(page, "fabricmon.state.hello !== window.__firstHello && fabricmon.state.ws && fabricmon.state.ws.readyState === 1")
    cols = page.evaluate("fabricmon.state.columns")
    wait_js(page, f"fabricmon.state.columns >= {cols + 2}")
    assert page.evaluate("fabricmon.heatmap.rowCount()") == len(index)

    # Hidden tab: the socket closes and nothing is drawn; visible again: resynchronised.
    page.evaluate("""Object.defineProperty(document, "hidden", {value: true, configurable: true});
                     document.dispatchEvent(new Event("visibilitychange"))""")
    wait_js(page, "fabricmon.state.ws === null")
    cols = page.evaluate("fabricmon.state.columns")
    page.wait_for_timeout(1500)  # three frames are appended meanwhile
    assert page.evaluate("fabricmon.state.columns") == cols
    assert "paused" in page.locator("#status").inner_text()
    page.evaluate("""Object.defineProperty(document, "hidden", {value: false, configurable: true});
                     document.dispatchEvent(new Event("visibilitychange"))""")
    wait_js(page, f"fabricmon.state.columns >= {cols + 1}")
    # The resync brought back the frames appended while hidden (no gap in the drawn window).
    assert page.evaluate(f"Math.max(...[1, 2, 3].map((age) => fabricmon.heatmap.column(age)[{hot}] % 255))") == round(0.93 * 254)


def test_rows_pooled_below_one_pixel_keep_the_hot_port_visible(page, daphne_server, fed_fabric, fabric_name, log_in):
    *_, hot = fed_fabric
    log_in(f"/fabric/{fabric_name}/")
    wait_js(page, "window.fabricmon && window.fabricmon.state.columns >= 1")
    # 192 rows on 48 pixel rows: 4 ports per pixel, each pixel row drawn as the max of its ports.
    found = page.evaluate(f"""(() => {{
      const h = fabricmon.heatmap;
      h.resize(h.canvas.width, 48); h.redraw();
      const y = Math.floor(h.rowToY(h.portRow[{hot}]));
      const hit = h.pick(h.canvas.width - 1, y);
      const px = h.ctx.getImageData(h.canvas.width - 1, y, 1, 1).data;
      const [r, g, b] = [px[0], px[1], px[2]];
      const lut = new Uint8Array(new Uint32Array([h.constructor.LUT_FOR_TEST[hit.shown]]).buffer);
      return {{port: hit.port, code: hit.code, ports: hit.range[1] - hit.range[0], same: r === lut[0] && g === lut[1] && b === lut[2]}};
    }})()""")
    assert found["ports"] >= 4 and found["port"] == hot and found["code"] == round(0.93 * 254)
    assert found["same"], "the pixel row is not drawn in the hot port's colour"


def test_port_and_switch_pages_say_why_a_metric_is_withheld_and_who_polls(page, daphne_server, fed_fabric, fabric_name, log_in, redis_client):
    """Health as the shard loop writes it (issue 14): the collector process and lease, the last
    poll, per port what its latest sample withheld and why, and ports re-mapped by ifName."""
    from collectors.snmp.slices import REASON_TEXT

    _, _index, hot = fed_fabric
    now = time.time_ns()
    live_window.write_health(redis_client, fabric_name, "leaf-r2", {
        "up": True, "last_success_ns": now, "last_poll_ns": now, "poll_ms": 4.0, "errors": 0,
        "interval_s": 1.0, "logged_state": "up",
        "collector": {"process": "worker7:4242", "shard": f"{fabric_name}:0", "lease": "worker7:4242:abc",
                      "lease_ttl_s": 0.85},
        "port_notes": {"Ethernet5": "in_bps: stale, in_discards_ps: no_cell"},
        "notes_text": {k: REASON_TEXT[k] for k in ("stale", "no_cell")},
        "ports_remapped": {"Ethernet5": [5, 17]}, "ifnames_read_ns": now, "ifname_error": "",
    })  # fmt: skip
    log_in(f"/fabric/{fabric_name}/port/{hot}/")
    page.wait_for_function("document.getElementById('port-health').textContent.includes('withheld')", timeout=20000)
    text = page.locator("#port-health").inner_text()
    assert "in_discards_ps withheld: the agent serves no valid cell" in text
    assert "in_bps withheld: the agent repeated unchanged counters" in text
    assert "ifIndex 5 in the topology, 17 on the switch" in text
    assert "polled by worker7:4242, shard" in page.locator("#health").inner_text()
    page.goto(f"{daphne_server.url}/fabric/{fabric_name}/switches/")
    row = page.locator("#health-rows tr", has_text="leaf-r2")
    row.wait_for()
    assert "worker7:4242" in row.inner_text() and "Ethernet5 5→17" in row.inner_text()


# Relative luminance (sRGB weights) of the newest column's pixel at each port's row, read back from
# the heatmap canvas as drawn; ports sharing a pixel row with others (collapsed) are left out.
ROW_LUMA = """(ports) => { const h = fabricmon.heatmap, ctx = h.ctx, x = h.canvas.width - Math.ceil(h.colPx / 2);
  return ports.map((p) => { const r = h.portRow[p];
    if (h.rowEnd[r] - h.rowStart[r] !== 1) return null;
    const y = Math.floor((h.rowToY(r) + h.rowToY(r + 1)) / 2), d = ctx.getImageData(x, y, 1, 1).data;
    return (0.2126 * d[0] + 0.7152 * d[1] + 0.0722 * d[2]) / 255; }); }"""


@pytest.fixture
def twin_fabric(daphne_server, redis_client, fabric_name):  # type: ignore[no-untyped-def]
    """40 s of the twin's MoE job (4 servers × 4 GPUs, PXN) ending now, as its 1 s counter frames."""
    from twin.config import TwinConfig
    from twin.job_reporter import TwinJobRecording

    rec = TwinJobRecording(TwinConfig(name=fabric_name, servers=4, gpus_per_server=4, spines=2), 40.0,
                           time.time_ns() - 41_000_000_000)
    daphne_server.manage("shell", "-c", "from fabricmon.core.topology.railgen import rail_optimized\n"
                         "from fabricmon.topology.services import import_fabric\n"
                         f"import_fabric(rail_optimized({fabric_name!r}, servers=4, gpus_per_server=4, spines=2, speed_gbps=400))")
    frames = rec.counter_frames(1.0)
    for f in frames:
        live_window.append(redis_client, f, max_frames=600)
    yield rec, frames
    daphne_server.forget_fabric(fabric_name)
    redis_client.delete(keys.frames(fabric_name))


def test_the_twins_hot_port_is_the_most_salient_cell_of_its_rail(page, daphne_server, twin_fabric, fabric_name, log_in, screenshot):
    """Out bit/s of the twin's job, drawn linear with the window's contrast: in the newest column's
    pixels the twin's hottest port (by its own counters) is the brightest of its rail by a clear
    step; idle ports (the uplinks and spines PXN leaves unused) are collapsed with a count; the
    hottest cells are outlined; the legend says the scale, the contrast mode and its range."""
    rec, frames = twin_fabric
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    out = np.asarray(frames[-1].metrics["out_bps"], dtype=np.float64)
    hot = int(np.argmax(out))
    rail = np.flatnonzero(rec.ports.rail == rec.ports.rail[hot])
    log_in(f"/fabric/{fabric_name}/?metric=out_bps&window=60")
    wait_js(page, "window.fabricmon && !Number.isNaN(fabricmon.heatmap.newestTs()) && fabricmon.state.hello")
    assert page.evaluate("fabricmon.state.hello.scale.kind") == "linear"
    assert page.evaluate("fabricmon.heatmap.contrast") == "window"

    def luma() -> np.ndarray:
        got = page.evaluate(ROW_LUMA, rail.tolist())
        return np.array([np.nan if v is None else v for v in got])

    lum = luma()
    at = int(np.flatnonzero(rail == hot)[0])
    others = np.delete(lum, at)
    others = others[np.isfinite(others)]
    assert len(others) >= 3 and np.isfinite(lum[at])
    assert lum[at] == np.nanmax(lum) and lum[at] - others.max() >= 0.15, (lum[at], np.sort(others)[-3:])
    assert lum[at] - np.median(others) >= 0.4, (lum[at], np.median(others))
    # top-k outline: the hot port is the newest column's top cell, and boxes are drawn
    assert page.evaluate("fabricmon.heatmap.topk[fabricmon.heatmap.head * fabricmon.heatmap.k]") == hot
    assert int(page.locator("#hot-overlay").get_attribute("data-boxes")) > 0
    # idle rows collapsed with a count: every port with no traffic in any frame
    idle = ~np.any([(np.asarray(f.metrics["in_bps"]) > 0) | (np.asarray(f.metrics["out_bps"]) > 0) for f in frames], axis=0)
    quiet = page.evaluate("(() => { const m = fabricmon.heatmap.idleMask(); return Array.from(m); })()")
    assert np.count_nonzero(quiet) >= np.count_nonzero(idle) > 0
    assert int(page.locator("#idle-info").get_attribute("data-ports")) == np.count_nonzero(quiet)
    assert page.evaluate("fabricmon.heatmap.rowCount()") < len(rec.ports)
    note = page.inner_text("#legend-note")
    assert note.startswith("ramp:") and "bit/s" in note
    screenshot("fabric-twin-linear-window-contrast")

    # the same pixels on the old scale (log, full range): the hot port barely stands out
    contrast_now = lum[at] - np.median(others)
    page.select_option("#contrast", "fixed")
    page.select_option("#scale", "log")
    wait_js(page, "fabricmon.state.hello.scale.kind === 'log' && !Number.isNaN(fabricmon.heatmap.newestTs())")
    page.wait_for_timeout(300)
    old = luma()
    old_others = np.delete(old, at)
    old_contrast = old[at] - np.nanmedian(old_others)
    print(f"twin hot port luminance lead over its rail's median: linear+window {contrast_now:.3f}, log+fixed {old_contrast:.3f}")
    assert contrast_now > 2 * old_contrast
    screenshot("fabric-twin-log-fixed")
    page.select_option("#scale", "linear")
    page.select_option("#contrast", "rail")
    wait_js(page, "fabricmon.state.hello.scale.kind === 'linear'")
    page.wait_for_timeout(300)
    lum = luma()
    assert lum[at] == np.nanmax(lum)
    assert "rail 0:" in page.inner_text("#legend-note")
    assert not errors, errors
