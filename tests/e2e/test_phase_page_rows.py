"""The phase page on a fabric with more ports than it sends as rows (FABRICMON_PHASE_MAX_PORTS):
at 16,896 ports every port of a full window was ~45 MB an answer. Here a server that sends at
most 10 of the twin fabric's ports: the socket's snapshot carries 10 rows (``shown_ports``), the
page draws them with their own labels, says how many of how many it sends, and every hot-port
marker — unfolded and folded over steps — sits on its own labelled row.

Screenshot: test-output/phases-bounded-rows.png."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from asgi_server import LiveServer, live_server
from phase_events import post_through_probe
from twin_runs import USER, twin_job_runs

from fabricmon.base import keys

pytestmark = [pytest.mark.e2e, pytest.mark.integration]
ROWS = 10
PASSWORD = "rows-e2e-password"


@pytest.fixture(scope="module")
def daphne_server(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = live_server(tmp_path_factory.mktemp("rows-server"), redis_url, FABRICMON_PHASE_MAX_PORTS=str(ROWS))
    server.manage("create_demo_user", "--username", USER, "--password", PASSWORD, "--role", "operators")
    yield server
    server.stop()


def test_a_fabric_larger_than_the_rows_draws_the_rows_sent_with_every_hot_port_on_its_own(
    page, daphne_server, redis_client, fabric_name, screenshot
) -> None:  # type: ignore[no-untyped-def]
    rec, (run_id,), client = twin_job_runs(daphne_server, redis_client, fabric_name, ("rows",))
    try:
        status, body = client.post_rank_map(run_id, rec.rank_map())
        assert status < 300, body
        post_through_probe(client, run_id, rec.events())
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        frames: list[dict] = []
        page.on("websocket", lambda ws: ws.on("framereceived", lambda p: frames.append(json.loads(p))))
        page.goto(f"{daphne_server.url}/accounts/login/?next=/phases/runs/{run_id}/")
        page.fill("input[name=username]", USER)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_function("document.getElementById('heatmap').dataset.drawn === '1'", timeout=60_000)
        snap = next(f for f in frames if f["type"] == "snapshot")
        shown = snap["meta"]["shown_ports"]
        assert len(shown) == ROWS < len(rec.ports) == snap["meta"]["ports_total"]
        assert len(snap["meta"]["ports"]) == ROWS
        assert all(len(col) == ROWS for col in snap["views"]["projected"]["values"])
        page.select_option("#ports", "all")
        page.wait_for_function(f"document.getElementById('heatmap').dataset.rows === '{ROWS}'")
        title = page.eval_on_selector("#heatmap .gtitle", "el => el.textContent")
        assert f"{ROWS} of {len(rec.ports)} sent" in title, title
        for fold in ("0", "1"):
            page.select_option("#fold", fold)
            page.wait_for_timeout(300)
            ticks = page.eval_on_selector("#heatmap", "el => el.layout.yaxis.ticktext")
            hot = page.eval_on_selector("#heatmap", "el => el.data.find(d => d.name === 'hot port (decisive)').y")
            assert len(ticks) == ROWS and not any(t.startswith("port #") for t in ticks), ticks
            assert hot and set(hot) <= set(ticks), (fold, hot, ticks)  # each marker on its own labelled row
        screenshot("phases-bounded-rows")
        assert errors == []
    finally:
        daphne_server.forget_fabric(fabric_name)
        redis_client.delete(keys.frames(fabric_name))
