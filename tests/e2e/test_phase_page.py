"""The phase-aligned heatmap page end to end: the twin's job reported through the probe's client
path to a real Daphne server, its counters in the live window, the page opened in Chromium.

What a job owner must be able to read, checked on the rendered SVG: every chart has its title and
its axes their words and units; by default only the run's own ports are rows, each labelled, and
every hot-port marker sits beside the label of its own port; a per-step "hot port over time" strip;
ambiguous claims drawn as such. Gates: a projection is drawn whatever the clocks (a 500 ms host
skew withholds the measured and attributed views, never the projection); a run whose ports carry
mostly other traffic has its measured and attributed views withheld, saying so.

Screenshots (test-output/): phases-all-gates-pass, phases-attributed-all-gates-pass,
phases-withheld-routing-mismatch, phases-withheld-half-rank-map, phases-skewed-clock-projection,
phases-other-traffic."""

from __future__ import annotations

import numpy as np
import pytest
from twin_runs import USER, twin_job_runs

from fabricmon.base import keys
from fabricmon.core.telemetry.frames import Frame
from fabricmon.telemetry import live_window

pytestmark = [pytest.mark.e2e, pytest.mark.integration]
CASES = ("clean", "half-rank-map", "skewed-clock")


@pytest.fixture
def phase_runs(daphne_server, redis_client, fabric_name):  # type: ignore[no-untyped-def]
    """The twin's 40 s job reported three times (clean, half rank map, skewed host) as runs of the
    e2e user on the server's own database; 1 s counter frames for that time in Redis. And a fourth
    run, on a second fabric of the same shape whose NIC ports carry 3× the job's bytes of other
    traffic (another tenant, or a run registered on the wrong fabric)."""
    rec, runs, client = twin_job_runs(daphne_server, redis_client, fabric_name, CASES)
    faults = ({}, {"coverage": 0.5}, {"skew_ns_by_host": {1: 500_000_000}})
    for run_id, kw in zip(runs, faults, strict=True):
        stats = rec.report(client, run_id, **kw)
        assert stats["posted"] > 0 and stats["rejected"] == 0 and stats["dropped"] == 0, stats
    busy = f"{fabric_name}b"
    out = daphne_server.manage("shell", "-c", "\n".join([
        "from django.contrib.auth import get_user_model",
        "from fabricmon.core.topology.railgen import rail_optimized",
        "from fabricmon.jobs.runs import create_run",
        "from fabricmon.topology.services import import_fabric",
        f"import_fabric(rail_optimized({busy!r}, servers=4, gpus_per_server=4, spines=2, speed_gbps=400))",
        f"u = get_user_model().objects.get(username={USER!r})",
        f"print(create_run(u, 'other-traffic', fabric={busy!r}, world_size={rec.world_size}).pk)",
    ]))
    other_run = int(out.strip().splitlines()[-1])
    host = rec.ports.host_facing
    for f in rec.counter_frames(1.0):
        m = {k: v.copy() for k, v in f.metrics.items()}
        for k in ("in_bps", "out_bps"):
            m[k][host] += np.float32(3.0 * float(m[k][host].mean()))
        live_window.append(redis_client, Frame(busy, f.topology_version, f.ts_ns, f.interval_s, m), max_frames=10_000)
    stats = rec.report(client, other_run)
    assert stats["rejected"] == 0, stats
    yield {**dict(zip(CASES, runs, strict=True)), "other-traffic": other_run, "rec": rec}
    for name in (fabric_name, busy):
        daphne_server.forget_fabric(name)
        redis_client.delete(keys.frames(name))


def _banner(page) -> str:  # type: ignore[no-untyped-def]
    page.wait_for_function("document.getElementById('gates').children.length > 0", timeout=30_000)
    return page.inner_text("#banner")


def _gates(page) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return page.eval_on_selector_all(
        "#gates .gate", "els => Object.fromEntries(els.map(e => [e.dataset.gate, e.className.split(' ')[1]]))"
    )


# Read from the rendered SVG: the chart's title, axis titles and colour-bar title, and per y tick
# its text and pixel row; per marker of a named trace its pixel row.
SVG_WORDS = """(id) => { const el = document.getElementById(id);
  const txt = (sel) => [...el.querySelectorAll(sel)].map(t => t.textContent.trim()).filter(Boolean);
  return {title: txt('.gtitle'), x: txt('.g-xtitle'), y: txt('.g-ytitle'), colorbar: txt('.cbtitle')}; }"""
SVG_ROWS = """([id, trace]) => { const el = document.getElementById(id);
  const ys = (t) => { const m = (t.getAttribute('transform') || '').match(/translate\\(([-\\d.]+),\\s*([-\\d.]+)\\)/);
                      return m ? Number(m[2]) : null; };
  const ticks = [...el.querySelectorAll('.yaxislayer-above .ytick text, .yaxislayer-above text.ytick')]
    .map(t => ({text: t.textContent, y: t.getBoundingClientRect().top + t.getBoundingClientRect().height / 2}));
  const idx = el.data.findIndex(d => d.name === trace);
  const pts = idx < 0 ? [] : [...el.querySelectorAll('.scatterlayer .trace')][idx - el.data.filter((d, i) => i < idx && d.type !== 'scatter').length]
    ?.querySelectorAll('.points path') ?? [];
  return {ticks, points: [...pts].map((p, i) => ({i, y: p.getBoundingClientRect().top + p.getBoundingClientRect().height / 2})),
          ys: el.data[idx]?.y ?? []}; }"""


def _words_ok(page, chart: str) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    words = page.evaluate(SVG_WORDS, chart)
    assert words["title"] and words["x"] and words["y"], (chart, words)
    return words


def _labels_beside_their_rows(page, trace: str) -> int:  # type: ignore[no-untyped-def]
    """Every marker of ``trace``: the y-tick label nearest its pixel row names its own port."""
    got = page.evaluate(SVG_ROWS, ["heatmap", trace])
    ticks, pts, ys = got["ticks"], got["points"], got["ys"]
    assert ticks, "no row labels"
    for p in pts:
        near = min(ticks, key=lambda t: abs(t["y"] - p["y"]))
        assert near["text"] == ys[p["i"]], (near, ys[p["i"]])
        assert abs(near["y"] - p["y"]) < 8  # beside it, not rows away
    return len(pts)


def test_phase_page_reads_for_a_job_owner_and_each_fault_withholds_what_it_must(
    page, daphne_server, phase_runs, log_in, screenshot
) -> None:  # type: ignore[no-untyped-def]
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    rec = phase_runs["rec"]
    log_in(f"/phases/runs/{phase_runs['clean']}/")
    assert _banner(page) == "projected — all gates pass"
    assert set(_gates(page).values()) == {"pass"} and set(_gates(page)) == {"rank_map_coverage", "projected_vs_measured"}
    page.wait_for_function("document.getElementById('heatmap').dataset.drawn === '1'")
    page.wait_for_function("document.getElementById('hotstrip').dataset.drawn === '1'")
    # words and units, from the rendered SVG (plotly.js 4 drops string titles silently)
    words = _words_ok(page, "heatmap")
    assert "bytes per port and phase" in words["title"][0] and words["colorbar"] == ["bytes per phase (B)"]
    assert "step" in words["x"][0] and "port" in words["y"][0]
    strip = _words_ok(page, "hotstrip")
    assert "Hot port over time" in strip["title"][0]
    # the run's own ports by default (its 16 NICs' leaf ports: PXN keeps the job on its rails), all labelled
    rows = int(page.eval_on_selector("#heatmap", "el => el.dataset.rows"))
    assert rows == rec.world_size < len(rec.ports)
    ticks = page.evaluate(SVG_ROWS, ["heatmap", "hot port (decisive)"])["ticks"]
    assert len(ticks) == rows and all("·" in t["text"] or "↔" in t["text"] for t in ticks)
    assert _labels_beside_their_rows(page, "hot port (decisive)") > 0
    assert int(page.eval_on_selector("#hotstrip", "el => el.dataset.ports")) >= 2  # the hot port moves
    screenshot("phases-all-gates-pass")

    # every port of the fabric, still every row labelled (spines named by switch, not "r-1")
    page.select_option("#ports", "all")
    page.wait_for_function(f"document.getElementById('heatmap').dataset.rows === '{len(rec.ports)}'")
    ticks = page.evaluate(SVG_ROWS, ["heatmap", "hot port (decisive)"])["ticks"]
    assert len(ticks) == len(rec.ports) and not any(t["text"].startswith("r-1") for t in ticks)
    assert any(t["text"].startswith("spine") and "↔" in t["text"] for t in ticks)
    _labels_beside_their_rows(page, "hot port (decisive)")
    page.select_option("#ports", "run")

    page.select_option("#source", "attributed")
    page.wait_for_function("document.getElementById('banner').textContent.startsWith('attributed')")
    assert page.inner_text("#banner") == "attributed — all gates pass"
    assert {"clock_alignment", "clock_noise", "counters_of_run"} <= set(_gates(page))
    # hot ports drawn only where the counters vouch for them; the rest say "ambiguous"
    page.wait_for_function("document.getElementById('hotinfo').textContent.startsWith('hot port decisive in')")
    claimed, ambiguous, columns = (
        int(page.eval_on_selector("#heatmap", f"el => el.dataset.{k}")) for k in ("claimed", "ambiguous", "columns")
    )
    assert claimed + ambiguous == columns and f"{ambiguous} ambiguous" in page.inner_text("#hotinfo")
    drawn = page.evaluate("Object.fromEntries(document.getElementById('heatmap').data.map(t => [t.name, (t.x || []).length]))")
    assert drawn["hot port (decisive)"] == claimed  # one marker per claimed cell, none where ambiguous
    assert ambiguous == 0 or drawn["ambiguous (no hot port claimed)"] >= 2 * ambiguous  # tied ports ringed
    _labels_beside_their_rows(page, "hot port (decisive)")
    screenshot("phases-attributed-all-gates-pass")

    # routing mismatch: the twin's fabric ran PXN; the operator assumes ECMP
    page.select_option("#source", "projected")
    page.select_option("#routing", "ecmp")
    page.wait_for_function("document.getElementById('banner').textContent.startsWith('projected view withheld')")
    text = page.inner_text("#banner")
    assert "projected_vs_measured" in text and "rank_map_coverage" not in text and "clock_alignment" not in text
    assert page.eval_on_selector("#heatmap", "el => el.dataset.drawn") == "0"
    screenshot("phases-withheld-routing-mismatch")

    page.goto(f"{daphne_server.url}/phases/runs/{phase_runs['half-rank-map']}/")
    text = _banner(page)
    assert text.startswith("projected view withheld: rank_map_coverage: 50 % < 90 %"), text
    assert _gates(page)["rank_map_coverage"] == "withhold"
    assert page.eval_on_selector("#heatmap", "el => el.dataset.drawn") == "0"
    screenshot("phases-withheld-half-rank-map")

    # a host 500 ms off: the projection has no clock and is drawn; the views on counters are not
    page.goto(f"{daphne_server.url}/phases/runs/{phase_runs['skewed-clock']}/")
    assert _banner(page) == "projected — all gates pass"
    page.wait_for_function("document.getElementById('heatmap').dataset.drawn === '1'")
    screenshot("phases-skewed-clock-projection")
    for source in ("measured", "attributed"):
        page.select_option("#source", source)
        page.wait_for_function(f"document.getElementById('banner').textContent.startsWith('{source} view withheld')")
        assert "clock_alignment: 500 ms > 250 ms" in page.inner_text("#banner")
        assert _gates(page)["clock_alignment"] == "withhold"

    # the counters on the run's ports are mostly other traffic: measured and attributed withheld, saying so
    page.goto(f"{daphne_server.url}/phases/runs/{phase_runs['other-traffic']}/")
    text = _banner(page)
    assert text.startswith("projected (flagged)") and "not the run's traffic" in text, text
    page.wait_for_function("document.getElementById('heatmap').dataset.drawn === '1'")
    for source in ("measured", "attributed"):
        page.select_option("#source", source)
        page.wait_for_function(f"document.getElementById('banner').textContent.startsWith('{source} view withheld')")
        text = page.inner_text("#banner")
        assert "counters_of_run:" in text and "mostly other traffic" in text, text
        assert _gates(page)["counters_of_run"] == "withhold"
        assert page.eval_on_selector("#heatmap", "el => el.dataset.drawn") == "0"
    screenshot("phases-other-traffic")
    assert not errors, errors
