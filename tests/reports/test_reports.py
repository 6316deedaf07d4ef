"""A run's report, its CSV and Parquet exports and the comparison of two runs, on a reported twin
run: the twin's job posted through the probe's client path to pytest-django's live server, its
counters in the live window as 1 s frames.

The exports are checked against the stored traffic matrices (every byte a rank sent to a rank on
another host enters the fabric at exactly one host-facing port and leaves it at exactly one, under
PXN) and against the phase views' own projected values; the report against the phase views.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from report_twin import recording, report, write_counters

from fabricmon.alerts.models import Alert, Episode
from fabricmon.base import keys
from fabricmon.jobs.models import Run, TrafficMatrix
from fabricmon.phases import services as phase_services
from fabricmon.phases.state import StepWindow
from fabricmon.reports import exports
from fabricmon.topology.fabric_view import fabric_view

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def rec(db, redis_client, fabric_name):  # type: ignore[no-untyped-def]
    r = recording(fabric_name)
    write_counters(redis_client, r)
    yield r
    redis_client.delete(keys.frames(fabric_name))


@pytest.fixture
def owner(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user("owner", password="pw")


@pytest.fixture
def twin_run(live_server, owner, rec):  # type: ignore[no-untyped-def]
    return report(live_server, owner, rec, tags=("model=twin-moe", "ep=16"))


def _data(html: str, element: str = "report-data") -> dict:  # type: ignore[type-arg]
    m = re.search(rf'<script id="{element}" type="application/json">(.*?)</script>', html, re.S)
    assert m, f"no {element} in the page"
    return json.loads(m.group(1))


def _alert(run: Run, fp: str, **kw) -> Alert:  # type: ignore[no-untyped-def]
    from django.utils import timezone

    now = timezone.now()
    return Alert.objects.create(fingerprint=fp, fabric=run.fabric, kind="incast", key="leaf-r0:1", state="firing",
                                active_since=now, last_true=now, fired_at=now, summary="incast on leaf-r0:1", **kw)


def test_the_report_is_one_self_contained_file_with_every_section(client, twin_run, rec) -> None:
    other = Run.objects.create(owner=twin_run.owner, name="other", fabric=twin_run.fabric)
    episode = Episode.objects.create(fabric=twin_run.fabric, opened_at=twin_run.started_at,
                                     attribution={"run_id": twin_run.pk, "line": f"run {twin_run.name} · layer 3"})
    _alert(twin_run, "mine", attribution={"run_id": twin_run.pk, "line": f"run {twin_run.name} · layer 3 dispatch"})
    _alert(twin_run, "via-episode", episode=episode)
    _alert(twin_run, "not-mine", attribution={"run_id": other.pk, "line": "run other"})
    client.force_login(twin_run.owner)
    resp = client.get(f"/jobs/runs/{twin_run.pk}/report.html")
    assert resp.status_code == 200 and resp["Content-Type"].startswith("text/html")
    assert resp["Content-Disposition"] == f'attachment; filename="fabricmon-run-{twin_run.pk}-twin-moe.html"'
    html = resp.content.decode()
    # offline: plotly.js inline (the pinned one), no script or stylesheet fetched from anywhere
    assert "plotly.js v4.1.1" in html[:300_000] or "v4.1.1" in html
    assert "<script src" not in html and '<link rel="stylesheet"' not in html
    for section in ("run-facts", "placement", "phase-heatmap", "hot-trajectory", "layer-totals", "gates",
                    "alerts", "exports"):
        assert f'<section id="{section}">' in html, section
    assert '<span class="tag">model=twin-moe</span>' in html and '<span class="tag">ep=16</span>' in html
    # placement: every rank with its host and leaf port
    table = html.split('id="placement-table"')[1].split("</table>")[0]
    assert table.count("<tr>") == rec.world_size + 1  # + the header
    first = rec.rank_map()[0]
    assert f"<td>{first['host']}</td>" in table
    # the alerts whose culprit names the run (its own, or its episode's), not another run's
    assert "2 alerts and 1 episode whose culprit names this run" in html
    assert "run twin-moe · layer 3 dispatch" in html and "run other" not in html
    # the heatmap is the phase views' projected view, bounded to the window and the run's ports
    data = _data(html)
    ph = data["phases"]
    assert ph["view"] == "projected" and ph["verdict"] == "show"
    snap = phase_services.phase_snapshot(twin_run, window=StepWindow())
    proj = snap.views["projected"]
    assert len(ph["heatmap"]["columns"]) == len(proj.columns)
    rows = ph["heatmap"]["rows"]
    assert 0 < len(rows) <= 96 and len(ph["heatmap"]["z"]) == len(rows)
    # every column's hot port is the phase views' hot port, named with its margin
    assert [t["port_index"] for t in ph["trajectory"]] == proj.hot.port.tolist()
    assert all(t["lead_rel"] is not None and t["port"] in rows for t in ph["trajectory"])
    load = np.asarray(proj.load_bytes)
    z = np.asarray(ph["heatmap"]["z"], dtype=np.float64)
    assert np.allclose(z, np.rint(load[:, ph["heatmap"]["row_ports"]].T))
    # gates of every view, with their reasons; the bound is said on the page
    for view in ("projected", "attributed", "measured"):
        assert f'data-view="{view}"' in html
    assert 'data-gate="rank_map_coverage"' in html and "poll_resolution" in html
    assert "the newest steps that fit 512 columns" in html and "96 at most" in html
    totals = {(t["layer"], t["phase"]): t["bytes"] for t in ph["totals"]}
    assert len(totals) == 2 * rec.cfg.job.layers and all(b > 0 for b in totals.values())


def test_who_may_get_a_report_an_export_and_a_comparison(client, django_user_model, twin_run) -> None:
    from django.contrib.auth.models import Group

    run = twin_run
    urls = [f"/jobs/runs/{run.pk}/report.html", f"/jobs/runs/{run.pk}/ports.csv",
            f"/jobs/runs/{run.pk}/ports.parquet", f"/jobs/compare/?a={run.pk}&b={run.pk}"]
    for url in urls:  # anonymous: the login form
        resp = client.get(url)
        assert resp.status_code == 302 and resp["Location"].startswith("/accounts/login/"), url
    stranger = django_user_model.objects.create_user("stranger")
    client.force_login(stranger)
    for url in urls:  # another job owner: as if the run did not exist
        assert client.get(url).status_code == 404, url
    mine = Run.objects.create(owner=stranger, name="mine", fabric=run.fabric)
    assert client.get(f"/jobs/compare/?a={mine.pk}&b={run.pk}").status_code == 404  # one run not theirs
    assert client.get(f"/jobs/compare/?a={mine.pk}&b={mine.pk}").status_code == 200
    operator = django_user_model.objects.create_user("oper")
    operator.groups.add(Group.objects.get_or_create(name="operators")[0])  # (a flushed database: no migrated groups)
    client.force_login(operator)
    for url in urls:
        resp = client.get(url)
        assert resp.status_code == 200, url
        b"".join(resp.streaming_content) if resp.streaming else resp.content


def test_the_csv_export_is_the_projection_of_the_stored_matrices(client, twin_run, rec) -> None:
    run = twin_run
    client.force_login(run.owner)
    resp = client.get(f"/jobs/runs/{run.pk}/ports.csv")
    assert resp.status_code == 200 and resp.streaming
    assert resp["Content-Disposition"] == f'attachment; filename="fabricmon-run-{run.pk}-twin-moe.ports.csv"'
    body = b"".join(resp.streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(body)))
    assert list(rows[0]) == ["step", "layer", "phase", "port_index", "switch", "port", "faces", "bytes_in",
                             "bytes_out"]
    matrices = TrafficMatrix.objects.filter(run=run, step__gte=0, layer__gte=0)
    assert {(int(r["step"]), int(r["layer"]), r["phase"]) for r in rows} == set(
        matrices.values_list("step", "layer", "phase"))
    # conservation against the matrices: cross-host bytes enter at one host-facing port, leave at one
    host = {e["rank"]: e["host"] for e in rec.rank_map()}
    hosts = np.array([host[r] for r in range(rec.world_size)])
    cross = hosts[:, None] != hosts[None, :]
    facing = fabric_view(run.fabric).index.host_facing
    into, out_of = defaultdict(int), defaultdict(int)
    for r in rows:
        if facing[int(r["port_index"])]:
            key = (int(r["step"]), int(r["layer"]), r["phase"])
            into[key] += int(r["bytes_in"])
            out_of[key] += int(r["bytes_out"])
    for m in matrices:
        key = (m.step, m.layer, m.phase)
        want = int(m.sent_array()[cross].sum())
        assert abs(into[key] - want) <= 16 and abs(out_of[key] - want) <= 16, key  # rounding per port
    # and per port what the phase views draw for a page of steps: max(in, out)
    proj = phase_services.phase_snapshot(run, window=StepWindow()).views["projected"]
    assert proj.load_bytes is not None, proj.gates
    got = np.zeros_like(np.asarray(proj.load_bytes))
    col = {tuple(c): i for i, c in enumerate(proj.columns)}
    for r in rows:
        key = (int(r["step"]), int(r["layer"]), r["phase"])
        if key in col:
            got[col[key], int(r["port_index"])] = max(int(r["bytes_in"]), int(r["bytes_out"]))
    assert np.allclose(got, np.asarray(proj.load_bytes), rtol=1e-6, atol=1.0)
    # a range of steps, and bad input named
    lo = min(int(r["step"]) for r in rows)
    ranged = client.get(f"/jobs/runs/{run.pk}/ports.csv", {"steps_from": lo, "steps_to": lo})
    part = list(csv.DictReader(io.StringIO(b"".join(ranged.streaming_content).decode())))
    assert part and {int(r["step"]) for r in part} == {lo}
    for bad, field in (({"steps_from": 3}, "steps_from"), ({"steps_from": 5, "steps_to": 1}, "steps_from"),
                       ({"routing": "bogus"}, "routing")):
        resp = client.get(f"/jobs/runs/{run.pk}/ports.csv", bad)
        assert resp.status_code == 400 and resp.json()["field"] == field, bad


def test_the_parquet_export_holds_the_csv_rows_one_row_group_per_chunk(client, twin_run) -> None:
    run = twin_run
    client.force_login(run.owner)
    resp = client.get(f"/jobs/runs/{run.pk}/ports.parquet")
    assert resp.status_code == 200 and resp.streaming and resp["Content-Type"] == "application/vnd.apache.parquet"
    f = pq.ParquetFile(io.BytesIO(b"".join(resp.streaming_content)))
    table = f.read()
    meta = f.schema_arrow.metadata
    assert meta[b"fabricmon.run"] == str(run.pk).encode() and meta[b"fabricmon.routing"] == b"pxn"
    rows = list(csv.DictReader(io.StringIO(b"".join(client.get(f"/jobs/runs/{run.pk}/ports.csv").streaming_content)
                                           .decode())))
    assert table.num_rows == len(rows)
    assert table.column("bytes_in").to_pylist() == [int(r["bytes_in"]) for r in rows]
    assert table.column("port").to_pylist() == [r["port"] for r in rows]
    # bounded memory: the export is made in chunks of matrices, each its own row group (a chunk of 16 here)
    n = TrafficMatrix.objects.filter(run=run, step__gte=0, layer__gte=0).count()
    parts = list(exports.parquet_chunks(exports.port_tables(run, phase_services.PXN, max_chunk=16), {"run": "x"}))
    small = pq.ParquetFile(io.BytesIO(b"".join(parts)))
    assert small.metadata.num_row_groups == -(-n // 16) and len(parts) == -(-n // 16) + 1
    assert small.read().equals(table.replace_schema_metadata(small.schema_arrow.metadata))
    assert all(len(t) <= 16 * 64 for t in exports.port_tables(run, phase_services.PXN, max_chunk=1))  # one matrix: ≤ ports rows
    assert pa.types.is_int64(table.schema.field("bytes_out").type)


def test_a_long_run_report_stays_within_its_bounds_and_says_them(client, settings, twin_run) -> None:
    settings.FABRICMON_REPORT_MAX_COLUMNS = 40  # 2 steps of 8 layers × 2 phases
    settings.FABRICMON_REPORT_MAX_PORTS = 6
    client.force_login(twin_run.owner)
    html = client.get(f"/jobs/runs/{twin_run.pk}/report.html").content.decode()
    ph = _data(html)["phases"]
    cols, rows = ph["heatmap"]["columns"], ph["heatmap"]["rows"]
    newest = max(int(s) for s in TrafficMatrix.objects.filter(run=twin_run).values_list("step", flat=True))
    # 40 // 16 keys a step: the newest 2 steps (the newest may be partly reported), every column of them
    in_window = TrafficMatrix.objects.filter(run=twin_run, step__gte=newest - 1, layer__gte=0).count()
    assert len(cols) == in_window <= 40 and len(rows) <= 6
    assert sorted({t["step"] for t in ph["trajectory"]}) == [newest - 1, newest]
    assert {t["port"] for t in ph["trajectory"]} <= set(rows)  # every hot port kept
    assert "the newest steps that fit 40 columns" in html and "6 at most" in html
    assert f"steps {newest - 1}–{newest} (2 reported steps of the run's steps 0–{newest})" in html


def test_two_runs_side_by_side(client, live_server, owner, rec, twin_run) -> None:
    half = report(live_server, owner, rec, name="half-mapped", coverage=0.5)
    _alert(twin_run, "a1", attribution={"run_id": twin_run.pk, "line": "x"})
    client.force_login(owner)
    resp = client.get("/jobs/compare/", {"a": twin_run.pk, "b": half.pk})
    assert resp.status_code == 200
    html = resp.content.decode()
    data = _data(html, "compare-data")
    assert data["a"]["phases"]["view"] == "projected" and data["a"]["phases"]["heatmap"]["rows"]
    # the half-mapped run's projection is withheld by its coverage gate: said, not drawn as true
    assert "rank_map_coverage: 50 % &lt; 90 %" in html or "rank_map_coverage: 50 %" in html
    assert data["b"]["phases"]["view"] != "projected"
    for row in ("row-tags", "row-placement", "row-hottest", "row-gates", "row-alerts"):
        assert f'id="{row}"' in html
    assert "1 alerts · 0 episodes" in html and "0 alerts · 0 episodes" in html
    assert html.count("<tr><td>") >= 2 * rec.cfg.job.layers  # the totals table: every (layer, phase)
    assert 'id="heatmap-a"' in html
    # choosing, and bad input named
    assert 'id="compare-choose"' in client.get("/jobs/compare/", {"a": twin_run.pk}).content.decode()
    bad = client.get("/jobs/compare/", {"a": "x1", "b": half.pk})
    assert bad.status_code == 400 and "a must be a run id" in bad.content.decode()


def test_a_run_without_a_known_fabric_is_said_not_a_500(client, owner) -> None:
    run = Run.objects.create(owner=owner, name="typo", fabric="no-such-fabric", world_size=4)
    client.force_login(owner)
    resp = client.get(f"/jobs/runs/{run.pk}/report.html")
    assert resp.status_code == 200
    assert "no-such-fabric&#x27; is not in the topology" in resp.content.decode()
    for ext in ("csv", "parquet"):
        resp = client.get(f"/jobs/runs/{run.pk}/ports.{ext}")
        assert resp.status_code == 422 and resp.json()["field"] == "fabric"
    none = Run.objects.create(owner=owner, name="no-fabric", world_size=4)
    assert client.get(f"/jobs/runs/{none.pk}/ports.csv").status_code == 422
    assert "names no fabric" in client.get(f"/jobs/runs/{none.pk}/report.html").content.decode()
