"""The phase page follows a running run without a reload: the twin's job reported in two halves to
a real Daphne server, the page opened in Chromium after the first; the heatmap arrives over the
run's WebSocket (a snapshot, no views.json request at all), the second half's columns arrive as
deltas and appear in place (same document), and when the run ends the page says the view is final.

Screenshot: test-output/phases-live-update.png."""

from __future__ import annotations

import json

import pytest
from phase_events import post_through_probe
from twin_runs import T0_NS, twin_job_runs

from fabricmon.base import keys
from fabricmon.phases.state import default_window_steps

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture
def running_run(daphne_server, redis_client, fabric_name):  # type: ignore[no-untyped-def]
    """A running run of the e2e user with the first half of the twin's 40 s job; the counters of all
    40 s in the live window. Yields (run id, client, recording)."""
    rec, (run_id,), client = twin_job_runs(daphne_server, redis_client, fabric_name, ("live",))
    status, body = client.post_rank_map(run_id, rec.rank_map())
    assert status < 300, body
    yield run_id, client, rec
    daphne_server.forget_fabric(fabric_name)
    redis_client.delete(keys.frames(fabric_name))


def test_phase_page_updates_in_place_while_the_run_runs(
    page, daphne_server, running_run, log_in, screenshot
) -> None:  # type: ignore[no-untyped-def]
    run_id, client, rec = running_run
    split_ns = T0_NS + 20_000_000_000
    events = list(rec.events())
    post_through_probe(client, run_id, (e for e in events if e["start_ns"] < split_ns))
    polled: list[str] = []
    frames: list[dict] = []
    page.on("request", lambda req: polled.append(req.url) if "views.json" in req.url else None)
    page.on(
        "websocket", lambda ws: ws.on("framereceived", lambda payload: frames.append(json.loads(payload)))
    )
    log_in(f"/phases/runs/{run_id}/")
    page.wait_for_function("document.getElementById('heatmap').dataset.drawn === '1'", timeout=60_000)
    assert frames and frames[0]["type"] == "snapshot"
    first = int(page.get_attribute("#window-info", "data-hi"))
    assert page.get_attribute("#window-info", "data-live") == "1"
    assert page.inner_text("#banner").startswith("projected")
    assert page.inner_text("#live").startswith("run running — live: updated")
    page.evaluate("window.sameDocument = true")  # gone if the page reloads

    post_through_probe(client, run_id, (e for e in events if e["start_ns"] >= split_ns))
    page.wait_for_function(
        f"Number(document.getElementById('window-info').dataset.hi) > {first}", timeout=60_000
    )
    assert page.evaluate("window.sameDocument === true")
    deltas = [f for f in frames if f["type"] == "delta" and "projected" in f.get("views", {})]
    assert deltas, [f["type"] for f in frames]
    # a delta carries the new columns and names the ones that left the window, never the view again
    assert all(d["views"]["projected"]["mode"] == "upsert" for d in deltas)
    assert any(d["views"]["projected"].get("drop") for d in deltas)
    shown = int(page.eval_on_selector("#heatmap", "el => el.dataset.columns"))
    assert shown <= default_window_steps() * 2 * rec.cfg.job.layers  # the window, not the run
    assert page.inner_text("#banner") == "projected — all gates pass"
    # the projection's own gates (it has no clock gate: no event time enters a projection)
    assert {page.get_attribute(f"#gates .gate[data-gate={g}]", "class")
            for g in ("rank_map_coverage", "projected_vs_measured")} == {"gate pass"}
    screenshot("phases-live-update")
    # page back through the run and return to the live steps, over the same socket
    lo = int(page.get_attribute("#window-info", "data-lo"))
    page.click("#older")
    page.wait_for_function(f"Number(document.getElementById('window-info').dataset.hi) < {lo}", timeout=60_000)
    assert page.get_attribute("#window-info", "data-live") == "0" and page.is_enabled("#live-steps")
    assert page.get_attribute("#heatmap", "data-drawn") == "1"
    page.click("#live-steps")
    page.wait_for_function("document.getElementById('window-info').dataset.live === '1'", timeout=60_000)

    daphne_server.manage(
        "shell",
        "-c",
        f"from fabricmon.jobs import runs; from fabricmon.jobs.models import Run; runs.end_run(Run.objects.get(pk={run_id}))",
    )
    page.wait_for_function("document.getElementById('live').dataset.state === 'finished'", timeout=60_000)
    assert page.inner_text("#live").startswith("run finished — final view")
    assert page.evaluate("window.sameDocument === true")
    assert polled == []  # everything came over the socket
