"""Phase markers on the live fabric heatmap in headless Chromium (real Daphne, real Redis): a run's
phase events drawn along the time axis under the streaming heatmap, new events appearing without a
reload, and a run whose host clock is 500 ms off drawn flagged with the clock gate's reason.

Screenshots: test-output/live-phase-markers-aligned.png, test-output/live-phase-markers-flagged.png."""

from __future__ import annotations

import ast
import itertools
import json
import time

import pytest
from phase_events import GAP_MS, phase_ndjson
from test_fabric_page import Feeder, wait_js

from fabricmon.base import keys
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.yaml_dump import dump_fabric
from tests.topologies import four_leaf_two_spine

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
USER = "op-e2e"  # the e2e session user (tests/e2e/conftest.py)
STEPS = 20  # x 2 layers x (dispatch, combine) = 80 markers over 8 s

INGEST = """
import json, sys
from django.contrib.auth import get_user_model
from fabricmon.jobs.runs import create_run
from fabricmon.jobs.ingest import ingest_ndjson
from fabricmon.jobs.models import Run
todo = json.loads(sys.stdin.read())
user = get_user_model().objects.get(username={user!r})
out = {{}}
for name, (run_id, body) in todo.items():
    run = Run.objects.get(pk=run_id) if run_id else create_run(user, name, fabric={fabric!r}, world_size=4)
    res = ingest_ndjson(run, body.encode(), clock_offset_ns=2_000_000)
    assert not res.rejected, res.rejected
    out[name] = run.pk
print(repr(out))
"""


def ingest(server, fabric: str, todo: dict[str, tuple[int | None, bytes]]) -> dict[str, int]:
    """Create (run id None) or extend runs of the e2e user on the server's database."""
    stdin = json.dumps({k: (rid, body.decode()) for k, (rid, body) in todo.items()}).encode()
    out = server.manage("shell", "-c", INGEST.format(user=USER, fabric=fabric), stdin=stdin)
    return ast.literal_eval(out.strip().splitlines()[-1])


@pytest.fixture
def fed_fabric(daphne_server, redis_client, fabric_name, tmp_path):
    spec = four_leaf_two_spine(fabric_name, servers=4)
    (tmp_path / "topology.yaml").write_text(dump_fabric(spec))
    daphne_server.manage("load_topology", str(tmp_path / "topology.yaml"))
    index = build_port_index(spec)
    feeder = Feeder(redis_client, fabric_name, index, hot=0)
    feeder.start()
    yield spec
    feeder.stop.set()
    feeder.join()
    daphne_server.forget_fabric(fabric_name)
    redis_client.delete(keys.frames(fabric_name))


def lane_pixels(page, y: int, rgb: tuple[int, int, int]) -> int:
    """How many pixels of strip row ``y`` have colour ``rgb`` (± 3 per channel), opaque — flagged markers are drawn faded."""
    return page.evaluate(
        """([y, rgb]) => { const c = document.getElementById('phase-strip');
           const d = c.getContext('2d').getImageData(0, y, c.width, 1).data; let n = 0;
           for (let i = 0; i < d.length; i += 4) if (d[i + 3] === 255 && [0, 1, 2].every(k => Math.abs(d[i + k] - rgb[k]) <= 3)) n++;
           return n; }""",
        [y, list(rgb)],
    )


def test_markers_stream_under_the_heatmap_and_are_flagged_when_the_clock_gate_fails(
    page, daphne_server, fed_fabric, fabric_name, log_in, screenshot
) -> None:  # type: ignore[no-untyped-def]
    t0_ns = time.time_ns() - 1_000_000_000  # the feeder runs since the fixture: phases over its frames
    runs = ingest(
        daphne_server,
        fabric_name,
        {
            "aligned": (None, phase_ndjson(t0_ns, steps=STEPS)),
            "skewed": (None, phase_ndjson(t0_ns, steps=STEPS, skew_ns_by_rank={3: 500_000_000})),
        },
    )
    polled: list[str] = []
    texts: list[dict] = []
    page.on("request", lambda req: polled.append(req.url) if "markers.json" in req.url else None)
    page.on("websocket", lambda ws: ws.on(
        "framereceived", lambda payload: texts.append(json.loads(payload)) if isinstance(payload, str) else None))
    log_in(f"/fabric/{fabric_name}/?run={runs['aligned']}")
    wait_js(page, "window.fabricmon && fabricmon.state.columns >= 1")
    wait_js(page, f"document.getElementById('phase-strip').dataset.markers === '{STEPS * 4}'")
    info = page.locator("#phase-info")
    assert info.get_attribute("data-verdict") == "pass"
    assert "80 phase markers · one mark per phase · aligned" in info.inner_text() and "clock error ≤" in info.inner_text()
    # one mark per phase although the 80 phases share a few heatmap columns: laid out apart, in time
    # order (once the heatmap's right edge has passed the last of them)
    wait_js(page, "fabricmon.strip.sorted.at(-1).start_ms < fabricmon.strip.drawnNewest")
    strip_canvas = page.locator("#phase-strip")
    assert strip_canvas.get_attribute("data-drawn") == str(STEPS * 4)
    placed = page.evaluate("fabricmon.strip.layout.markers.map((m, i) => [m.phase, fabricmon.strip.layout.x[i]])")
    assert len(placed) == STEPS * 4
    for phase in ("dispatch", "combine"):  # one lane each: in a lane, every mark its own pixels, in time order
        xs = [x for p, x in placed if p == phase]
        assert len(xs) == STEPS * 2 and all(b - a >= 1 for a, b in itertools.pairwise(xs)), xs
    span_px = page.evaluate("(() => { const s = fabricmon.strip; return s.xOf(s.sorted.at(-1).end_ms) - s.xOf(s.sorted[0].start_ms); })()")
    xs = [x for _, x in placed]
    assert max(xs) - min(xs) > 2 * span_px  # the phases' true span is far too narrow for 80 marks
    options = page.eval_on_selector_all("#run option", "els => els.map(e => e.value)")
    assert str(runs["aligned"]) in options and str(runs["skewed"]) in options
    # dispatch in the top lane (blue), combine in the second (orange), fully opaque: aligned
    assert lane_pixels(page, 2, (31, 119, 180)) > 0 and lane_pixels(page, 8, (255, 127, 14)) > 0
    assert lane_pixels(page, 19, (198, 40, 40)) == 0  # no "not aligned" rule

    # new phases of the running job appear without a reload, painted into their own span
    drawn = page.evaluate("fabricmon.strip.paints")
    later_ns = t0_ns + STEPS * 4 * GAP_MS * 1_000_000
    ingest(
        daphne_server,
        fabric_name,
        {"aligned": (runs["aligned"], phase_ndjson(later_ns, steps=5, first_step=STEPS))},
    )
    wait_js(page, f"document.getElementById('phase-strip').dataset.markers === '{(STEPS + 5) * 4}'")
    assert page.evaluate("fabricmon.strip.paints") > drawn
    # over the heatmap's socket: everything once, then only the new markers
    sent = [m for m in texts if m["type"] == "markers" and m["run"] == runs["aligned"]]
    assert sent[0]["reset"] and len(sent[0]["markers"]) == STEPS * 4
    assert not sent[-1]["reset"] and {m["step"] for m in sent[-1]["markers"]} <= set(range(STEPS - 3, STEPS + 5))
    assert sum(len(m["markers"]) for m in sent[1:]) < STEPS * 4
    # the heatmap's right edge passes the newest phase: follow() paints it as the columns arrive
    wait_js(page, "fabricmon.strip.sorted.at(-1).end_ms < fabricmon.strip.drawnNewest")
    # hovering a marker names its step, layer and phase
    x = page.evaluate(
        "(() => { const s = fabricmon.strip, m = s.sorted[s.sorted.length - 1];"
        " return s.placeOf(m.step, m.layer, m.phase) * s.canvas.clientWidth / s.canvas.width; })()"
    )
    page.hover("#phase-strip", position={"x": x, "y": 8})
    wait_js(page, "!document.getElementById('tooltip').hidden")
    assert f"step {STEPS + 4} · layer 1 · combine" in page.inner_text("#tooltip")
    screenshot("live-phase-markers-aligned")

    page.select_option("#run", str(runs["skewed"]))
    wait_js(page, "document.getElementById('phase-info').dataset.verdict === 'withhold'")
    text = info.inner_text()
    assert "NOT ALIGNED" in text and "clock_alignment: 500 ms >" in text, text
    wait_js(page, f"document.getElementById('phase-strip').dataset.markers === '{STEPS * 4}'")
    assert lane_pixels(page, 19, (198, 40, 40)) > 0  # the red rule under every flagged marker
    assert lane_pixels(page, 2, (31, 119, 180)) == 0  # faded: never the aligned colour
    assert page.evaluate("new URLSearchParams(location.search).get('run')") == str(runs["skewed"])
    screenshot("live-phase-markers-flagged")
    assert polled == []  # nothing polled: the markers came over the socket
