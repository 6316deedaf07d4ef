"""The run page of a long run in headless Chromium (real Daphne): the timeline of 300 k events
arrives aggregated (one answer of buckets × rows, whatever the run holds), is drawn on a canvas,
zooms in by dragging to the exact bars, and the page raises no console error.

Screenshots: test-output/run-timeline-whole.png, test-output/run-timeline-zoomed.png."""

from __future__ import annotations

import ast

import pytest
from test_fabric_page import wait_js

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
USER = "op-e2e"

FILL = """
from django.contrib.auth import get_user_model
from fabricmon.jobs.runs import create_run
from tests.jobs.long_runs import fill_run
run = create_run(get_user_model().objects.get(username={user!r}), "long-run-e2e", world_size=64)
fill_run(run, {events}, ranks=64)
print(repr(run.pk))
"""


def test_a_long_runs_timeline_is_drawn_aggregated_and_zooms_to_exact_bars(
    page, daphne_server, log_in, screenshot
) -> None:  # type: ignore[no-untyped-def]
    out = daphne_server.manage("shell", "-c", FILL.format(user=USER, events=300_000))
    run_id = ast.literal_eval(out.strip().splitlines()[-1])
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    sizes: list[int] = []
    page.on("response", lambda r: sizes.append(len(r.body())) if "timeline.json" in r.url else None)
    log_in(f"/jobs/runs/{run_id}/")
    wait_js(page, "document.getElementById('timeline').dataset.events === '300000'")
    assert page.get_attribute("#timeline", "data-exact") == "0"
    info = page.locator("#timeline .timeline-info").inner_text()
    assert "300,000 events" in info and "time buckets" in info
    # the canvas has colour: dispatch blue and combine orange cells
    coloured = page.evaluate("""() => { const c = document.querySelector('#timeline canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i] !== d[i + 2]) n++; return n; }""")
    assert coloured > 1000
    screenshot("run-timeline-whole")
    # drag across a sliver of the time axis: the server answers that span, with its exact bars
    box = page.locator("#timeline canvas").bounding_box()
    page.mouse.move(box["x"] + 100, box["y"] + 20)
    page.mouse.down()
    page.mouse.move(box["x"] + 105, box["y"] + 20, steps=3)
    page.mouse.up()
    wait_js(page, "document.getElementById('timeline').dataset.exact === '1'")
    zoomed = int(page.get_attribute("#timeline", "data-events"))
    assert 0 < zoomed < 3000
    screenshot("run-timeline-zoomed")
    page.dblclick("#timeline canvas")
    wait_js(page, "document.getElementById('timeline').dataset.events === '300000'")
    assert max(sizes) < 600_000, sizes  # bounded by the screen, not by the 300 k events
    assert not errors, errors
