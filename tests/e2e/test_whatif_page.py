"""The What-if page end to end: the twin's job reported through the probe's client path to a real
Daphne server, its counters in the live window, the page opened in Chromium and screenshotted
(test-output/whatif-*.png): every figure drawn with its assumptions and gate verdicts, the
hierarchy claim withheld for the unmeasured fast/slow ratio, and the scheduler export followed."""

from __future__ import annotations

import pytest
from twin_runs import twin_job_runs

from fabricmon.base import keys

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture
def whatif_run(daphne_server, redis_client, fabric_name):  # type: ignore[no-untyped-def]
    rec, runs, client = twin_job_runs(daphne_server, redis_client, fabric_name, ("whatif",), duration_s=12.0)
    stats = rec.report(client, runs[0])
    assert stats["posted"] > 0 and stats["rejected"] == 0 and stats["dropped"] == 0, stats
    yield runs[0]
    daphne_server.forget_fabric(fabric_name)
    redis_client.delete(keys.frames(fabric_name))


def _verdicts(page) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return page.eval_on_selector_all(
        "section.wf[data-verdict]", "els => Object.fromEntries(els.map(e => [e.id, e.dataset.verdict]))")


def test_whatif_page_shows_every_figure_with_its_gates(page, daphne_server, whatif_run, log_in,
                                                       screenshot) -> None:  # type: ignore[no-untyped-def]
    log_in(f"/phases/runs/{whatif_run}/")
    page.click("#whatif-link")
    page.wait_for_selector("#fig-hierarchy")
    assert page.inner_text("#banner").startswith("Sensitivity, not a deployment prediction")
    v = _verdicts(page)
    assert v["fig-hierarchy"] == "withhold"  # no row size declared, no measured ratio
    assert v["fig-optics"] == "show" and v["fig-collectives"] == "show" and v["fig-placement"] == "show"
    assert "row_size" in page.inner_text("#fig-hierarchy .withheld")
    screenshot("whatif-defaults")
    page.fill("input[name=hidden]", "7168")
    page.fill("input[name=bytes_per_elem]", "1")
    page.fill("input[name=fast_slow_ratio]", "9")
    page.click("form.params button[type=submit]")
    page.wait_for_selector("#fig-hierarchy")
    text = page.inner_text("#fig-hierarchy")
    assert "ratio_measured" in text and "row_size" not in page.inner_text("#fig-hierarchy .withheld")
    assert "if the ratio were 9" in text  # the assumed ratio: sensitivity only, the claim stays withheld
    gates = page.eval_on_selector_all("#fig-hierarchy .gate", "els => els.map(e => e.dataset.gate + ':' + e.className)")
    assert "flat_prediction:gate pass" in gates and "ratio_measured:gate withhold" in gates
    screenshot("whatif-row-declared-ratio-assumed")
    page.click("text=topology.conf")
    assert "SwitchName=su0 Nodes=node[001-004]" in page.inner_text("body")
