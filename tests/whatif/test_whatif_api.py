"""The What-if API on reported twin runs (real ingest API on pytest-django's live server, real
Redis for the counters): every figure with its gates, and one run per fault that makes a gate fail
and withholds the claim with its reason.

    clean          hierarchy withheld only for the unmeasured fast/slow ratio; optics, collectives,
                   routing, placement shown
    timed ratio    + all-reduces timed inside a server and between servers → ratio 8 measured,
                   every hierarchy gate passes and the per-layer verdict is shown
    recv × 0.8     receivers report 20 % less than senders sent → byte_accounting withholds
    rolled combine combine no longer retraces dispatch → phase_symmetry withholds the optics
    no timings     dispatch events start and end at the same instant → phase_timings and
                   flat_prediction withhold
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from whatif_twin import DISPATCH_ROW_BYTES, recording, report, write_counters

from collectors.probe.matrix import events_from_matrix
from fabricmon.base import keys
from twin.job_reporter import rank_hosts

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROW = {"hidden": DISPATCH_ROW_BYTES, "bytes_per_elem": 1}


@pytest.fixture
def rec(db, redis_client, fabric_name):  # type: ignore[no-untyped-def]
    r = recording(fabric_name)
    write_counters(redis_client, r)
    yield r
    redis_client.delete(keys.frames(fabric_name))


@pytest.fixture
def owner(django_user_model, client):  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user("owner", password="pw")
    client.force_login(user)
    return user


def _events(rec, *, combine=None, recv_scale: float = 1.0, zero_dispatch_time: bool = False):  # type: ignore[no-untyped-def]
    hosts = rank_hosts(rec.fabric)
    for ph in rec.phases:
        m = ph.matrix if ph.phase == "dispatch" or combine is None else combine(ph.matrix)
        end = ph.start_ns if zero_dispatch_time and ph.phase == "dispatch" else ph.end_ns
        for ev in events_from_matrix(m, step=ph.step, layer=ph.layer, phase=ph.phase, start_ns=ph.start_ns,
                                     end_ns=end, id_prefix="w", hosts=hosts):
            if recv_scale != 1.0 and ph.phase == "dispatch":
                ev["recv_bytes_per_pg_rank"] = [int(v * recv_scale) for v in ev["recv_bytes_per_pg_rank"]]
            yield ev


def _timed_allreduces(rec, n: int = 4) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """All-reduces inside server 0 at 100 GB/s and across servers (one rank each) at 12.5 GB/s."""
    hosts = rank_hosts(rec.fabric)
    t = rec.phases[-1].end_ns + 1_000_000_000
    out = []
    for i in range(n):
        for name, ranks, dur in (("intra", [0, 1, 2, 3], 1_000_000), ("inter", [0, 4, 8, 12], 8_000_000)):
            for r in ranks:
                out.append({"id": f"ar-{name}-{i}-{r}", "rank": r, "host": hosts[r], "step": 1000 + i,
                            "phase": "allreduce", "collective": "all_reduce", "pg_ranks": ranks,
                            "start_ns": t, "end_ns": t + dur, "bytes_sent": 100_000_000, "source": "twin",
                            "time_kind": "simulated"})
            t += dur + 1_000_000
    return out


def _get(client, run, **q):  # type: ignore[no-untyped-def]
    resp = client.get(f"/whatif/runs/{run.pk}/whatif.json", q)
    assert resp.status_code == 200, resp.content[:500]
    data = resp.json()
    return data, {f["name"]: f for f in data["figures"]}


def _gates(fig) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {g["name"]: g["verdict"] for g in fig["gates"]}


def test_clean_run_every_figure_and_the_unmeasured_ratio_withholds_the_hierarchy(
    live_server, owner, client, rec, django_user_model
) -> None:
    run = report(live_server, owner, rec)
    _, figs = _get(client, run, **ROW)
    h = figs["hierarchy"]
    assert _gates(h) == {"row_size": "pass", "byte_accounting": "pass", "ratio_measured": "withhold",
                         "flat_prediction": "pass", "phase_timings": "pass"}
    assert h["values"] is None and any(r.startswith("ratio_measured") for r in h["withheld_because"])
    assert h["note"] == "sensitivity, not a deployment prediction"
    be = h["always"]["breakeven_per_layer"]
    assert len(be) == 8 and all(1.0 < b["zero"] < b["fused"] < b["measured"] for b in be)
    o = figs["optics"]
    assert o["verdict"] == "show" and _gates(o)["phase_symmetry"] == "pass"
    assert o["values"]["servers"] == 4 and o["values"]["locality_regions"] == pytest.approx(1.0)
    assert o["values"]["cost"]["cost_ratio"] == pytest.approx(2.378, abs=0.001)  # 400G prices
    c = {s["schedule"]: s for s in figs["collectives"]["values"]["schedules"]}
    assert c["allreduce ring (rank order)"]["steps"] == 30 and c["allreduce tree (double binary)"]["steps"] == 8
    assert c["alltoall hierarchical"]["uplink_bytes"] == 0  # rail-aligned inter-host stage
    r = figs["routing"]["values"]
    assert set(r["routings"]) == {"pxn", "spray", "ecmp(seed=0)", "ecmp(seed=1)", "ecmp(seed=2)"}
    assert r["routings"]["pxn"]["uplink_peak_bytes"] == 0 < r["routings"]["ecmp(seed=0)"]["uplink_peak_bytes"]
    assert figs["placement"]["verdict"] == "show" and "before" in figs["placement"]["values"]
    # without the declared row size the twin's cells (not whole rows) withhold the hierarchy too
    _, bare = _get(client, run)
    assert _gates(bare["hierarchy"])["row_size"] == "withhold"
    # a bad parameter is a 400 naming it, never a 500
    bad = client.get(f"/whatif/runs/{run.pk}/whatif.json", {"alpha": "9"})
    assert bad.status_code == 400 and bad.json()["field"] == "alpha"
    # the page (server-rendered), the command and the scheduler exports say the same
    page = client.get(f"/whatif/runs/{run.pk}/", ROW).content.decode()
    assert 'id="fig-hierarchy" data-verdict="withhold"' in page and 'id="fig-optics" data-verdict="show"' in page
    assert "Sensitivity, not a deployment prediction" in page and "claim withheld" in page
    assert client.get(f"/whatif/runs/{run.pk}/", {"top_k": "x"}).status_code == 400
    out = io.StringIO()
    call_command("whatif", str(run.pk), "--hidden", "7168", "--bytes-per-elem", "1", stdout=out)
    cli = {f["name"]: f for f in json.loads(out.getvalue())["figures"]}
    assert cli["hierarchy"]["always"] == figs["hierarchy"]["always"]
    conf = client.get(f"/whatif/runs/{run.pk}/export/topology.conf").content.decode()
    assert "SwitchName=su0 Nodes=node[001-004]" in conf and "SwitchName=spine0 Switches=su0" in conf
    assert client.get(f"/whatif/runs/{run.pk}/export/nope").status_code == 404
    # another user's run is not theirs to see
    client.force_login(django_user_model.objects.create_user("other", password="pw"))
    assert client.get(f"/whatif/runs/{run.pk}/whatif.json").status_code == 404


def test_timed_collectives_measure_the_ratio_and_the_verdict_is_shown(live_server, owner, client, rec) -> None:
    run = report(live_server, owner, rec, events=[*_events(rec), *_timed_allreduces(rec)])
    data, figs = _get(client, run, **ROW)
    h = figs["hierarchy"]
    assert set(_gates(h).values()) == {"pass"}, h["withheld_because"]
    assert data["rate_samples"] == {"fast": 16, "slow": 16}
    layers = h["values"]["layers"]
    assert h["values"]["ratio"] == pytest.approx(8.0)
    for layer in layers:
        assert layer["verdict"]["zero"] == "hierarchy wins"  # 8 > the zero-overhead breakeven
        assert layer["verdict"]["measured"] == ("hierarchy wins" if layer["breakeven"]["measured"] < 8
                                                else "hierarchy loses")
    sizes = figs["collectives"]["values"]["measured_sizes"]
    assert sizes == {"allreduce": 100_000_000}


def test_inconsistent_byte_accounting_withholds(live_server, owner, client, rec) -> None:
    run = report(live_server, owner, rec, events=list(_events(rec, recv_scale=0.8)))
    _, figs = _get(client, run, **ROW)
    assert _gates(figs["hierarchy"])["byte_accounting"] == "withhold"
    assert any(r.startswith("byte_accounting") for r in figs["hierarchy"]["withheld_because"])


def test_asymmetric_phases_withhold_the_optics(live_server, owner, client, rec) -> None:
    run = report(live_server, owner, rec, events=list(_events(rec, combine=lambda m: np.roll(m, 4, axis=1))))
    _, figs = _get(client, run, **ROW)
    o = figs["optics"]
    assert _gates(o)["phase_symmetry"] == "withhold" and o["values"] is None
    assert o["always"]["symmetry_per_layer"]["0"] > 0.05


def test_missing_timings_withhold(live_server, owner, client, rec) -> None:
    run = report(live_server, owner, rec, events=list(_events(rec, zero_dispatch_time=True)))
    _, figs = _get(client, run, **ROW)
    assert _gates(figs["hierarchy"])["flat_prediction"] == "withhold"
    assert _gates(figs["optics"])["phase_timings"] == "withhold" and figs["optics"]["values"] is None
