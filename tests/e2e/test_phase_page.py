"""The phase-aligned heatmap page end to end: the twin's job reported through the probe's client
path to a real Daphne server, its counters in the live window, the page opened in Chromium.

Screenshots (test-output/): all gates passing (heatmap drawn, hot ports marked), and each fault
withholding the view with its reason — half the rank map, a 500 ms clock skew on one host, and a
routing mismatch (the fabric ran PXN, the page is switched to ECMP)."""

from __future__ import annotations

import pytest
from twin_runs import twin_job_runs

from fabricmon.base import keys

pytestmark = [pytest.mark.e2e, pytest.mark.integration]
CASES = ("clean", "half-rank-map", "skewed-clock")


@pytest.fixture
def phase_runs(daphne_server, redis_client, fabric_name):  # type: ignore[no-untyped-def]
    """The twin's 40 s job reported three times (clean, half rank map, skewed host) as runs of the
    e2e user on the server's own database; 1 s counter frames for that time in Redis."""
    rec, runs, client = twin_job_runs(daphne_server, redis_client, fabric_name, CASES)
    faults = ({}, {"coverage": 0.5}, {"skew_ns_by_host": {1: 500_000_000}})
    for run_id, kw in zip(runs, faults, strict=True):
        stats = rec.report(client, run_id, **kw)
        assert stats["posted"] > 0 and stats["rejected"] == 0 and stats["dropped"] == 0, stats
    yield dict(zip(CASES, runs, strict=True))
    daphne_server.forget_fabric(fabric_name)
    redis_client.delete(keys.frames(fabric_name))


def _banner(page) -> str:  # type: ignore[no-untyped-def]
    page.wait_for_function("document.getElementById('gates').children.length > 0", timeout=30_000)
    return page.inner_text("#banner")


def _gates(page) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return page.eval_on_selector_all(
        "#gates .gate", "els => Object.fromEntries(els.map(e => [e.dataset.gate, e.className.split(' ')[1]]))"
    )


def test_phase_page_all_gates_pass_and_each_fault_withholds(
    page, daphne_server, phase_runs, log_in, screenshot
) -> None:  # type: ignore[no-untyped-def]
    log_in(f"/phases/runs/{phase_runs['clean']}/")
    assert _banner(page) == "projected — all gates pass"
    assert set(_gates(page).values()) == {"pass"} and len(_gates(page)) == 3
    page.wait_for_function("document.getElementById('heatmap').dataset.drawn === '1'")
    assert page.locator("#heatmap .hm, #heatmap .heatmaplayer").count() > 0
    screenshot("phases-all-gates-pass")
    page.select_option("#source", "attributed")
    page.wait_for_function("document.getElementById('banner').textContent.startsWith('attributed')")
    assert page.inner_text("#banner") == "attributed — all gates pass"
    # hot ports drawn only where the counters vouch for them; the rest say "ambiguous"
    page.wait_for_function("document.getElementById('hotinfo').textContent.startsWith('hot port claimed in')")
    claimed, ambiguous, columns = (
        int(page.eval_on_selector("#heatmap", f"el => el.dataset.{k}")) for k in ("claimed", "ambiguous", "columns")
    )
    assert claimed + ambiguous == columns and f"{ambiguous} ambiguous" in page.inner_text("#hotinfo")
    drawn = page.evaluate("Object.fromEntries(document.getElementById('heatmap').data.map(t => [t.name, (t.x || []).length]))")
    assert drawn["hot port"] == claimed  # one marker per claimed cell, none where ambiguous
    screenshot("phases-attributed-all-gates-pass")

    # routing mismatch: the twin's fabric ran PXN; the operator assumes ECMP
    page.select_option("#source", "projected")
    page.select_option("#routing", "ecmp")
    page.wait_for_function(
        "document.getElementById('banner').textContent.startsWith('projected view withheld')"
    )
    text = page.inner_text("#banner")
    assert (
        "projected_vs_measured" in text and "rank_map_coverage" not in text and "clock_alignment" not in text
    )
    assert page.eval_on_selector("#heatmap", "el => el.dataset.drawn") == "0"
    screenshot("phases-withheld-routing-mismatch")

    page.goto(f"{daphne_server.url}/phases/runs/{phase_runs['half-rank-map']}/")
    text = _banner(page)
    assert text.startswith("projected view withheld: rank_map_coverage: 50 % < 90 %"), text
    assert _gates(page)["rank_map_coverage"] == "withhold" and _gates(page)["clock_alignment"] == "pass"
    assert page.eval_on_selector("#heatmap", "el => el.dataset.drawn") == "0"
    screenshot("phases-withheld-half-rank-map")

    page.goto(f"{daphne_server.url}/phases/runs/{phase_runs['skewed-clock']}/")
    text = _banner(page)
    assert text.startswith("projected view withheld") and "clock_alignment: 500 ms >" in text, text
    assert _gates(page)["clock_alignment"] == "withhold" and _gates(page)["rank_map_coverage"] == "pass"
    assert page.eval_on_selector("#heatmap", "el => el.dataset.drawn") == "0"
    screenshot("phases-withheld-clock-skew")
