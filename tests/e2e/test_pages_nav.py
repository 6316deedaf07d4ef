"""Every page of the top bar in headless Chromium (real Daphne, real Redis), as an operator and as
a job owner: each role is shown its links and lands where its work is, no page logs a console
error, and every chart on the run and port pages carries its title and axis titles with units,
read from the rendered SVG; each figure validates against the served plotly.js (colour scales
that exist, title objects), whose version is the one the pages are written for.

Screenshots (test-output/): pages-<role>-<page>.png for each page looked at."""

from __future__ import annotations

import ast
import re

import pytest
from test_fabric_page import wait_js
from twin_runs import twin_job_runs

from collectors.probe import IngestClient
from fabricmon.base import keys
from fabricmon.live.staticfinders import PLOTLY_JS_VERSION

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
OWNER, OWNER_PASSWORD = "owner-e2e", "owner-e2e-password"

SETUP = """
from datetime import UTC, datetime
from django.contrib.auth import get_user_model
from fabricmon.alerts.models import Alert, Episode, Receiver
from fabricmon.jobs.runs import create_run
from fabricmon.jobs.tokens import issue_token
users = get_user_model()
owner = users.objects.filter(username={owner!r}).first() or users.objects.create_user({owner!r}, password={password!r})
run = create_run(owner, "owners-moe", fabric={fabric!r}, world_size={world})
now = datetime.now(UTC)
ep = Episode.objects.create(fabric={fabric!r}, opened_at=now, kinds=["moving_incast"], migrations=2,
    trajectory=[{{"ts_ns": 1, "ports": ["leaf-r1:Ethernet3"], "hosts": ["node003"], "gpus": [1], "ranks": [9]}},
                {{"ts_ns": 2, "ports": ["leaf-r2:Ethernet1"], "hosts": ["node001"], "gpus": [2], "ranks": [2],
                  "leaf_jump": True, "rail_jump": True}}])
Alert.objects.create(fingerprint="e2e-" + str(run.pk), fabric={fabric!r}, kind="moving_incast", key="leaf-r2:Ethernet1",
    state="firing", active_since=now, last_true=now, fired_at=now, episode=ep, summary="hot port moved 2 times")
Receiver.objects.create(name="owners-hook", kind="webhook", url="https://chat.example/hook", owner=owner)
print(repr((run.pk, issue_token(owner)[1], ep.pk)))
"""


@pytest.fixture
def product(daphne_server, redis_client, fabric_name):  # type: ignore[no-untyped-def]
    """The twin's job reported as a run of the operator and one of a job owner (each through the
    probe's client with the user's own token), its counters in the live window, a firing alert."""
    rec, runs, client = twin_job_runs(daphne_server, redis_client, fabric_name, ("operators-moe",), duration_s=12.0)
    out = daphne_server.manage("shell", "-c", SETUP.format(owner=OWNER, password=OWNER_PASSWORD,
                                                           fabric=fabric_name, world=rec.world_size))
    owner_run, owner_token, episode = ast.literal_eval(out.strip().splitlines()[-1])
    for run_id, c in ((runs[0], client), (owner_run, IngestClient(daphne_server.url, owner_token))):
        stats = rec.report(c, run_id)
        assert stats["posted"] > 0 and stats["rejected"] == 0, stats
    yield {"operator_run": runs[0], "owner_run": owner_run, "episode": episode}
    daphne_server.forget_fabric(fabric_name)
    redis_client.delete(keys.frames(fabric_name))


def log_in_as(page, server, user: str, password: str) -> None:  # type: ignore[no-untyped-def]
    page.context.clear_cookies()
    page.goto(f"{server.url}/accounts/login/?next=/")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_load_state()


def nav(page) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return page.eval_on_selector_all(
        "header.topbar [data-nav]", "els => Object.fromEntries(els.map(e => [e.dataset.nav, e.getAttribute('href')]))")


PLOTLY_WORDS = """el => {
  const text = (sel) => Array.from(el.querySelectorAll(sel)).map(t => t.textContent).join(' ').trim();
  return {title: text('.gtitle'), x: text('.xtitle'), y: text('.ytitle'), colorbar: text('.cbtitle'),
          invalid: (Plotly.validate(el.data, el.layout) || []).map(e => e.msg)};
}"""
UNIT = re.compile(r"\((?:%|[kMGT]?bit/s|[kMGT]?B|packets/s|frames/s)\)|\b(?:Gbit/s|Mbit/s|kbit/s|bit/s|%|s|ms|min)\b")


def plotly_charts(page, selector: str) -> list[dict]:  # type: ignore[no-untyped-def]
    return page.eval_on_selector_all(selector, f"els => els.map({PLOTLY_WORDS})")


def test_every_nav_page_for_an_operator_and_a_job_owner(page, daphne_server, product, fabric_name,
                                                         screenshot) -> None:  # type: ignore[no-untyped-def]
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"{page.url}: {exc}"))

    # -- the operator: lands on the fabric; the bar has the fabric, switches, runs, a run, alerts
    log_in_as(page, daphne_server, "op-e2e", "op-e2e-password")
    assert page.url.endswith(f"/fabric/{fabric_name}/"), page.url
    links = nav(page)
    assert set(links) == {"fabric", "switches", "runs", "phases", "alerts"}, links
    assert links["phases"].startswith("/phases/runs/")
    looked: dict[str, str] = {}
    for name, href in links.items():
        page.goto(f"{daphne_server.url}{href}")
        page.wait_for_load_state("networkidle")
        assert page.get_attribute(f'[data-nav="{name}"]', "aria-current") == "page", name
        looked[name] = page.url
        screenshot(f"pages-operator-{name}")

    # the run page: its timeline framed in SVG, its matrix titled, both with units
    run = product["operator_run"]
    page.goto(f"{daphne_server.url}/jobs/runs/{run}/")
    wait_js(page, "document.getElementById('matrix').dataset.drawn && document.querySelector('#timeline svg .title')")
    assert page.evaluate("Plotly.version") == PLOTLY_JS_VERSION
    selected = page.eval_on_selector("#matrix-key", "s => s.value")
    assert selected.endswith("|0|dispatch"), selected  # the first MoE layer's dispatch, not "layer -1 · other"
    [matrix] = plotly_charts(page, "#matrix")
    assert matrix["title"].startswith("Bytes sent, source → destination rank") and "layer 0 · dispatch" in matrix["title"]
    assert (matrix["x"], matrix["y"]) == ("destination rank", "source rank")
    assert re.fullmatch(r"sent \((?:[kMGT]B|B)\)", matrix["colorbar"]), matrix["colorbar"]
    assert matrix["invalid"] == [], matrix["invalid"]
    axes = page.eval_on_selector_all("#timeline svg text", "els => els.map(e => [e.getAttribute('class'), e.textContent])")
    titles = [t for c, t in axes if c == "title"]
    axis_titles = [t for c, t in axes if c == "axis-title"]
    ranks = [int(t) for c, t in axes if c == "tick rank-tick"]
    assert titles and titles[0].startswith("Collective calls per rank over time")
    assert "rank" in axis_titles and any(re.fullmatch(r"time since the run started \((?:ms|s|min)\)", t) for t in axis_titles)
    assert ranks == sorted(ranks) and ranks[0] == 0 and len(ranks) >= 4  # numeric, rank 0 at the top
    assert {"dispatch", "combine"} <= {t for c, t in axes if c == "tick"}  # the phase key
    assert page.get_attribute("#phases-link", "href") == f"/phases/runs/{run}/"
    assert page.get_attribute("#whatif-link", "href") == f"/whatif/runs/{run}/"
    screenshot("pages-operator-run")
    for link in ("#phases-link", "#whatif-link"):  # the run page's own links open
        href = page.get_attribute(link, "href")
        page.click(link)
        page.wait_for_url(f"**{href}")
        page.go_back()
        page.wait_for_selector(link)

    # the port page: a chart per metric, each titled in operator words with its unit
    page.goto(f"{daphne_server.url}/fabric/{fabric_name}/port/0/")
    wait_js(page, "Number(document.getElementById('port-view').dataset.charts || 0) >= 2")
    wait_js(page, "document.querySelectorAll('#charts .chart .gtitle').length >= 2")
    charts = plotly_charts(page, "#charts .chart")
    words = [c["title"].split("(")[0].strip() for c in charts]
    assert words[:2] == ["Receive rate", "Transmit rate"], words
    for c in charts:
        assert "_" not in c["title"] and UNIT.search(c["title"]), c  # no raw keys like "in_bps (bit/s)"
        assert c["x"] == "time (local)" and UNIT.fullmatch(c["y"]), c
        assert c["invalid"] == [], c
    assert charts[0]["title"].startswith("Receive rate (Gbit/s)")  # a 400G port reads in Gbit/s
    screenshot("pages-operator-port")

    # the alert pages and the episode, in the same look
    for path, name in (("/alerts/", "alerts"), ("/alerts/receivers/", "receivers"), ("/alerts/rules/", "rules"),
                       (f"/alerts/episodes/{product['episode']}/", "episode")):
        page.goto(f"{daphne_server.url}{path}")
        page.wait_for_load_state("networkidle")
        assert page.locator("main .page .subnav").count() == 1, path
        screenshot(f"pages-operator-{name}")
    assert page.locator("link[rel=icon]").get_attribute("href") == "/static/base/favicon.svg"

    # -- the job owner: lands on their runs; the bar has runs, their run's phases, their receivers
    page.context.clear_cookies()
    page.goto(f"{daphne_server.url}/accounts/login/?next=/")
    screenshot("pages-login")
    log_in_as(page, daphne_server, OWNER, OWNER_PASSWORD)
    assert page.url.endswith("/jobs/"), page.url
    links = nav(page)
    assert links == {"runs": "/jobs/", "phases": f"/phases/runs/{product['owner_run']}/",
                     "alerts": "/alerts/receivers/"}, links
    assert page.locator("table.health tbody tr").count() == 1  # their own run only
    screenshot("pages-owner-runs")
    for name, href in links.items():
        page.goto(f"{daphne_server.url}{href}")
        page.wait_for_load_state("networkidle")
        screenshot(f"pages-owner-{name}")
    page.goto(f"{daphne_server.url}/jobs/runs/{product['owner_run']}/")
    wait_js(page, "document.getElementById('matrix').dataset.drawn && document.querySelector('#timeline svg .title')")
    [matrix] = plotly_charts(page, "#matrix")
    assert matrix["title"].startswith("Bytes sent") and matrix["invalid"] == []
    screenshot("pages-owner-run")
    assert not errors, errors
    # the fabric is not a job owner's: a 403 that says where their things are
    resp = page.goto(f"{daphne_server.url}/fabric/{fabric_name}/")
    assert resp is not None and resp.status == 403
    assert page.locator("main a[href='/jobs/']").count() == 1
    screenshot("pages-owner-fabric-403")
