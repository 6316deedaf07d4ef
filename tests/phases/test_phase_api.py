"""The phases API on a reported twin run: the twin's job posts through the probe's client path
(EventPoster → the real ingest API on pytest-django's live server), its counters sit in the live
window as 1 s frames; the API projects the stored matrices and gates every view.

Faults, each failing its own gate and withholding the view with its reason (values never sent):
a 500 ms clock skew on one host, a rank map covering half the ranks, and a routing mismatch (the
fabric ran PXN, the view assumes ECMP)."""

from __future__ import annotations

import re

import pytest
from phase_twin import recording, report, write_counters

from fabricmon.base import keys
from fabricmon.jobs import blocks
from fabricmon.phases.state import MAX_WINDOW_STEPS, default_window_steps

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def rec(db, redis_client, fabric_name):  # type: ignore[no-untyped-def]
    r = recording(fabric_name)
    write_counters(redis_client, r)
    yield r
    redis_client.delete(keys.frames(fabric_name))


def _gates(view):  # type: ignore[no-untyped-def]
    return {g["name"]: g["verdict"] for g in view["gates"]}


def test_without_faults_every_gate_passes_and_views_carry_values(
    live_server, django_user_model, client, rec
) -> None:
    user = django_user_model.objects.create_user("owner", password="pw")
    client.force_login(user)
    run = report(live_server, user, rec)
    assert blocks.event_count(run) == len(rec.phases) * rec.world_size
    data = client.get(f"/phases/runs/{run.pk}/views.json").json()
    assert "projected" in data["views"], data.get("error")
    for source in ("projected", "attributed"):
        view = data["views"][source]
        assert view["verdict"] == "show" and view["failed"] == [], (source, view["failed"])
        assert set(_gates(view).values()) == {"pass"}
        assert view["values"] is not None and len(view["hot_port"]) == len(view["columns"])
    proj = data["views"]["projected"]
    assert set(_gates(proj)) == {"rank_map_coverage", "projected_vs_measured"}  # no clock in a projection
    assert set(_gates(data["views"]["attributed"])) >= {"clock_alignment", "clock_noise", "counters_of_run"}
    assert data["run_ports"] and set(data["run_ports"]) <= set(range(len(rec.ports)))
    # the live views cover the run's newest reported steps, not the whole run (a page of the screen)
    newest = sorted({p.step for p in rec.phases})[-default_window_steps():]
    window = [[p.step, p.layer, p.phase] for p in rec.phases if p.step in newest]
    assert sorted(proj["columns"]) == sorted(window) and len(proj["values"][0]) == len(rec.ports)
    assert data["window"]["live"] and data["window"]["steps"] == [newest[0], newest[-1]]
    assert data["window"]["run_steps"] == [rec.phases[0].step, max(p.step for p in rec.phases)]
    # older steps are paged: at most MAX_WINDOW_STEPS a page, the same gates judged on that page
    page1 = client.get(f"/phases/runs/{run.pk}/views.json", {"steps_from": 0, "steps_to": 9}).json()
    assert {c[0] for c in page1["views"]["projected"]["columns"]} == set(range(10))
    assert not page1["window"]["live"] and page1["window"]["steps"] == [0, 9]
    wide = client.get(f"/phases/runs/{run.pk}/views.json", {"steps_from": 0, "steps_to": 10**6}).json()
    assert wide["window"]["reported_steps"] == MAX_WINDOW_STEPS
    for bad in ({"steps_from": 5}, {"steps_from": 9, "steps_to": 3}, {"steps_from": "x", "steps_to": 3}):
        resp = client.get(f"/phases/runs/{run.pk}/views.json", bad)
        assert resp.status_code == 400 and "steps_" in resp.json()["error"], bad
    # measured per phase at 1 s polls is true but coarse: drawn, flagged, and it says why
    assert data["views"]["measured"]["verdict"] == "flag"
    assert data["views"]["measured"]["failed"][0].startswith("poll_resolution")
    folded = client.get(f"/phases/runs/{run.pk}/views.json?fold=1").json()["views"]["projected"]
    assert len(folded["columns"]) == 2 * rec.cfg.job.layers and folded["columns"][0][0] == -1
    page = client.get(f"/phases/runs/{run.pk}/")
    assert page.status_code == 200 and b"phase-aligned heatmap" in page.content
    assert client.get(f"/phases/runs/{run.pk}/views.json?routing=bogus").status_code == 400


def test_a_fabric_larger_than_the_rows_sends_each_columns_hot_port_then_the_busiest(
    live_server, django_user_model, client, rec, settings
) -> None:
    """At 16,896 ports every port of a 16-step window was ~45 MB an answer (views.json p95 6.7 s in
    the scale bench): above FABRICMON_PHASE_MAX_PORTS the rows are bounded, the rest named."""
    settings.FABRICMON_PHASE_MAX_PORTS = 8
    user = django_user_model.objects.create_user("owner-rows", password="pw")
    client.force_login(user)
    run = report(live_server, user, rec)
    url = f"/phases/runs/{run.pk}/views.json"
    n = len(rec.ports)
    full = client.get(url, {"max_ports": 4096}).json()  # a fabric smaller than that: every port
    assert full["shown_ports"] == list(range(n)) and full["ports_total"] == n > 8
    data = client.get(url).json()
    rows = data["shown_ports"]
    assert len(rows) == len(data["ports"]) == 8 and rows == sorted(rows) and data["ports_total"] == n
    assert data["ports"] == [full["ports"][p] for p in rows]
    hot = set()
    for source, view in data["views"].items():
        whole = full["views"][source]
        if view["values"] is None:
            continue
        assert view["values"] == [[col[p] for p in rows] for col in whole["values"]], source
        assert view["hot_port"] == whole["hot_port"], source  # by position, over every port
        hot |= {p for p in view["hot_port"] if p is not None}
    # as many rows as distinct hot ports (+2): every one of them is a row
    few = client.get(url, {"max_ports": len(hot) + 2}).json()
    assert hot <= set(few["shown_ports"]) and len(few["shown_ports"]) == len(hot) + 2 < n
    folded = client.get(url, {"fold": 1, "max_ports": len(hot) + 2}).json()["views"]["projected"]
    whole_folded = client.get(url, {"fold": 1, "max_ports": 4096}).json()["views"]["projected"]
    assert folded["hot_port"] == whole_folded["hot_port"]  # positions, not row numbers
    for bad in ("0", "x", "5000"):
        resp = client.get(url, {"max_ports": bad})
        assert resp.status_code == 400 and resp.json()["field"] == "max_ports", bad
        assert "from 1 to 4096" in resp.json()["error"]


def test_each_fault_withholds_with_its_reason(live_server, django_user_model, client, rec) -> None:
    user = django_user_model.objects.create_user("owner2", password="pw")
    client.force_login(user)

    half = _run_views(client, report(live_server, user, rec, coverage=0.5))
    proj = half["views"]["projected"]
    assert proj["verdict"] == "withhold" and proj["values"] is None and proj["hot_port"] is None
    assert proj["failed"][0].startswith("rank_map_coverage: 50 % < 90 %")
    # … and says which ranks, not only how many (a rank-map entry of every other host is gone)
    assert re.search(r"not placed: ranks \d", proj["failed"][0]), proj["failed"][0]
    assert "clock_alignment" not in _gates(proj)

    skewed = _run_views(client, report(live_server, user, rec, skew_ns_by_host={1: 500_000_000}))
    assert abs(skewed["clock"]["error_bound_ns"] - 5e8) < 1e7
    assert skewed["views"]["projected"]["verdict"] == "show"  # a projection has no clock to be off
    for source in ("measured", "attributed"):
        view = skewed["views"][source]
        assert view["verdict"] == "withhold" and view["values"] is None
        assert any(r.startswith("clock_alignment: 500 ms >") for r in view["failed"])

    full = report(live_server, user, rec)
    mismatch = client.get(f"/phases/runs/{full.pk}/views.json?routing=ecmp").json()["views"]["projected"]
    assert mismatch["verdict"] == "withhold" and mismatch["values"] is None
    assert [r.split(":")[0] for r in mismatch["failed"]] == ["projected_vs_measured"]
    assert _gates(mismatch)["projected_vs_measured"] == "withhold"


def _run_views(client, run):  # type: ignore[no-untyped-def]
    return client.get(f"/phases/runs/{run.pk}/views.json").json()


def test_a_run_on_a_fabric_not_in_the_topology_is_a_422_naming_it(db, django_user_model, client) -> None:
    from fabricmon.jobs.runs import create_run

    user = django_user_model.objects.create_user("typo", password="pw")
    client.force_login(user)
    run = create_run(user, "typo-run", world_size=8, fabric="no-such-fabric")
    resp = client.get(f"/phases/runs/{run.pk}/views.json")
    assert resp.status_code == 422 and resp.json()["field"] == "fabric"
    assert "'no-such-fabric' is not in the topology" in resp.json()["error"]
    # the run's socket and page ask the same state: an error snapshot, not an exception
    from fabricmon.phases import state

    snap = state.run_state(run).snapshot(run)
    assert snap.error is not None and "no-such-fabric" in snap.error
