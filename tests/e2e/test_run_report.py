"""A run's report end to end: the twin's job reported through the probe's client path to a real
Daphne server, the report downloaded by Chromium from the run page's link, then opened from disk
(file://) in an offline browser context — no server behind it — where every section is there,
every chart is drawn with its title and units (read from the rendered SVG, and valid for the
inlined plotly.js), nothing is fetched and no console error is logged. The report is kept as
test-output/run-report.html with its screenshot test-output/run-report.png; the comparison of two
runs is opened on the server (test-output/run-compare.png) and the CSV export read through it."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from twin_runs import twin_job_runs

from fabricmon.base import keys

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

OUTPUT = Path(__file__).resolve().parents[2] / "test-output"

CHART_WORDS = """el => {
  const text = (sel) => Array.from(el.querySelectorAll(sel)).map(t => t.textContent).join(' ').trim();
  return {id: el.id, title: text('.gtitle'), x: text('.xtitle'), y: text('.ytitle'), colorbar: text('.cbtitle'),
          invalid: (Plotly.validate(el.data, el.layout) || []).map(e => e.msg)};
}"""
UNIT = re.compile(r"\((?:B|%)\)|%")
SECTIONS = ("run-facts", "placement", "phase-heatmap", "hot-trajectory", "layer-totals", "gates", "alerts", "exports")


@pytest.fixture
def two_runs(daphne_server, redis_client, fabric_name):  # type: ignore[no-untyped-def]
    rec, runs, client = twin_job_runs(daphne_server, redis_client, fabric_name, ("twin-report", "twin-other"),
                                      duration_s=12.0)
    for run in runs:
        stats = rec.report(client, run)
        assert stats["posted"] > 0 and stats["rejected"] == 0 and stats["dropped"] == 0, stats
    yield rec, runs
    daphne_server.forget_fabric(fabric_name)
    redis_client.delete(keys.frames(fabric_name))


def _charts(page, selector: str) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    return page.eval_on_selector_all(selector, f"els => els.map({CHART_WORDS})")


def _check_charts(charts: list[dict]) -> None:  # type: ignore[type-arg]
    assert charts
    for c in charts:
        assert c["title"] and UNIT.search(c["title"]), c
        assert c["x"] and c["y"], c
        assert c["invalid"] == [], c


def test_the_downloaded_report_opens_from_disk_with_its_charts(browser, page, daphne_server, two_runs, log_in,
                                                               screenshot) -> None:  # type: ignore[no-untyped-def]
    rec, runs = two_runs
    log_in(f"/jobs/runs/{runs[0]}/")
    page.fill("input[name=tags]", "model=twin-moe, ep=16, seed=7")
    page.click("text=Save tags")
    page.wait_for_load_state()
    assert page.is_visible("#report-links")
    with page.expect_download() as got:
        page.click("#report-link")
    download = got.value
    assert download.suggested_filename == f"fabricmon-run-{runs[0]}-twin-report.html"
    OUTPUT.mkdir(exist_ok=True)
    path = OUTPUT / "run-report.html"
    download.save_as(str(path))
    assert path.stat().st_size > 4_000_000  # plotly.js is inside it

    offline = browser.new_context(viewport={"width": 1400, "height": 900}, offline=True)
    try:
        report = offline.new_page()
        errors: list[str] = []
        fetched: list[str] = []
        report.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        report.on("pageerror", lambda exc: errors.append(str(exc)))
        report.on("request", lambda r: fetched.append(r.url))
        report.goto(path.as_uri())
        for chart in ("heatmap", "trajectory", "totals"):
            report.wait_for_selector(f"#{chart}[data-drawn='1'] .main-svg", timeout=30_000)
        for section in SECTIONS:
            assert report.is_visible(f"section#{section}"), section
        charts = _charts(report, ".chart[data-drawn='1']")
        assert {c["id"] for c in charts} == {"heatmap", "trajectory", "totals"}
        _check_charts(charts)
        heat = next(c for c in charts if c["id"] == "heatmap")
        assert heat["colorbar"] == "bytes per phase (B)" and "steps" in heat["title"]
        assert heat["y"].startswith("port (switch:port")
        assert report.locator("#heatmap .hm image").count() >= 1  # the cells drawn
        assert report.locator("#placement-table tbody tr").count() == rec.world_size
        assert sorted(report.locator("#tags .tag").all_inner_texts()) == ["ep=16", "model=twin-moe", "seed=7"]
        assert report.locator(".gate-view").count() == 3
        assert "poll_resolution" in report.inner_text("#gates")
        assert "0 alerts and 0 episodes" in report.inner_text("#alerts")
        assert "Bounded for sharing" in report.inner_text("#bounds")
        assert [u for u in fetched if not u.startswith(("file:", "data:", "blob:"))] == []
        assert errors == []
        report.screenshot(path=str(OUTPUT / "run-report.png"), full_page=True)
    finally:
        offline.close()

    # the comparison of the two runs, on the server
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{daphne_server.url}/jobs/")
    page.select_option("#compare-form select[name=a]", str(runs[0]))
    page.select_option("#compare-form select[name=b]", str(runs[1]))
    page.click("#compare-form button[type=submit]")
    page.wait_for_selector("#heatmap-b[data-drawn='1'] .main-svg", timeout=30_000)
    page.wait_for_selector("#heatmap-a[data-drawn='1'] .main-svg")
    charts = _charts(page, ".chart[data-drawn='1']")
    assert {c["id"] for c in charts} == {"heatmap-a", "heatmap-b", "totals"}
    _check_charts(charts)
    assert "twin-report" in page.inner_text("#compare-table") and "twin-other" in page.inner_text("#compare-table")
    assert errors == []
    screenshot("run-compare")

    # the CSV export through the real server (streamed by Daphne)
    resp = page.request.get(f"{daphne_server.url}/jobs/runs/{runs[0]}/ports.csv")
    assert resp.status == 200 and "attachment" in resp.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(resp.text())))
    assert rows and {r["phase"] for r in rows} == {"dispatch", "combine"}
    assert sum(int(r["bytes_in"]) for r in rows) > 0
