"""The probe on a real 4-rank gloo MoE job, posting to a live fabricmon server (Daphne, SQLite
file DB), and the same run's Kineto traces and Flight Recorder dumps imported through the API.

Scenario::

    pytest ──HTTP──▶ daphne (fabricmon, sqlite file) ◀──HTTP (probe poster)── 4 torch ranks (gloo)
                                                     ◀──upload (Kineto, FR json+pickle)── pytest
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from asgi_server import manage, start_daphne

from collectors.probe import IngestClient

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


@pytest.fixture(scope="module")
def fabricmon_server(tmp_path_factory: pytest.TempPathFactory):
    """A real Daphne serving fabricmon on a free loopback port, with a migrated SQLite file."""
    tmp = tmp_path_factory.mktemp("live")
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
        "FABRICMON_VAR_DIR": str(tmp),
        "DJANGO_SETTINGS_MODULE": "fabricmon.settings",
    }
    manage(env, "migrate", "--noinput", "-v", "0")
    tokens = [manage(env, "create_api_token", user, "--create-user").strip() for user in ("alice", "mallory")]
    proc, base = start_daphne(env, tmp / "daphne.log")
    yield base, tokens[0], tokens[1]
    proc.terminate()
    proc.wait(10)


def _events(client: IngestClient, run_id: int, source: str) -> list[dict]:
    import urllib.request

    req = urllib.request.Request(f"{client.base_url}/jobs/api/runs/{run_id}/events?source={source}")
    req.add_header("Authorization", f"Bearer {client.token}")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return [json.loads(line) for line in resp.read().splitlines() if line.strip()]


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_probe_kineto_and_flight_recorder_agree_on_a_real_gloo_moe_run(
    fabricmon_server, tmp_path: Path
) -> None:
    base, token, other_token = fabricmon_server
    client = IngestClient(base, token)
    run_id = client.create_run("moe-gloo-4", ["model=toy-moe", "ep=4"], world_size=4)
    world, layers, steps = 4, 2, 2
    proc = subprocess.run(
        [
            PY,
            str(ROOT / "tests/jobs/moe_ranks.py"),
            str(tmp_path),
            base,
            token,
            str(run_id),
            "--world",
            str(world),
            "--layers",
            str(layers),
            "--steps",
            str(steps),
        ],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]

    # -- the probe: every all-to-all recorded, labels right, send(s→d) == recv(d←s) ----------------
    for r in range(world):
        stats = json.loads((tmp_path / f"poster_rank{r}.json").read_text())
        assert stats["dropped"] == 0 and stats["rejected"] == 0 and stats["probe_errors"] == 0, stats
    probe = _events(client, run_id, "probe")
    truth = {r: json.loads((tmp_path / f"truth_rank{r}.json").read_text()) for r in range(world)}
    assert len(probe) == sum(len(t) for t in truth.values()) == world * steps * layers * 4
    by_key = {(e["rank"], e["step"], e["layer"], e["phase"]): e for e in probe}
    assert len(by_key) == len(probe)  # one call per (rank, step, layer, phase)
    for r, calls in truth.items():
        for t in calls:
            e = by_key[(r, t["step"], t["layer"], t["phase"])]
            assert e["send_bytes_per_peer"] == {
                str(d): n * t["row_bytes"] for d, n in enumerate(t["in_splits"])
            }
            assert e["recv_bytes_per_peer"] == {
                str(s): n * t["row_bytes"] for s, n in enumerate(t["out_splits"])
            }
    assert {e["phase"] for e in probe} == {"dispatch", "combine", "dispatch_bwd", "combine_bwd"}
    calls = defaultdict(dict)
    for e in probe:
        calls[(e["step"], e["layer"], e["phase"])][e["rank"]] = e
    for key, per_rank in calls.items():
        assert set(per_rank) == set(range(world)), key
        for s in range(world):
            for d in range(world):
                assert (
                    per_rank[s]["send_bytes_per_peer"][str(d)] == per_rank[d]["recv_bytes_per_peer"][str(s)]
                ), (key, s, d)
    # the stored matrices agree with the events and are self-consistent
    status, m = client.request("GET", f"/jobs/api/runs/{run_id}/matrix?step=1&layer=1&phase=combine_bwd")
    assert status == 200 and m["sent"] == m["received"]
    assert m["sent"][2][3] == calls[(1, 1, "combine_bwd")][2]["send_bytes_per_peer"]["3"]

    # -- the same run's Kineto traces and Flight Recorder dumps, uploaded --------------------------
    kineto_run = client.create_run("moe-gloo-4 kineto")
    fr_run = client.create_run("moe-gloo-4 fr")
    for r in range(world):
        status, body = client.upload_trace(kineto_run, "kineto", tmp_path / f"kineto_rank{r}.json")
        assert status == 200, body
        status, body = client.upload_trace(fr_run, "fr", tmp_path / f"fr_rank{r}.json", rank=r)
        assert status == 200, body
        status, body = client.upload_trace(fr_run, "fr_pickle", tmp_path / f"fr_rank{r}.pkl", rank=r)
        assert status == 200 and body["stored"] == 0 and body["duplicates"] > 0, body  # same entries as JSON
    kineto_all = _events(client, kineto_run, "kineto")
    kineto = {(e["rank"], e["seq"]): e for e in kineto_all if e["collective"].startswith("all_to_all")}
    # the counts exchange (all_gather of int64 splits) is imported too, with its bytes
    gathers = [e for e in kineto_all if e["collective"] == "allgather"]
    assert len(gathers) == world * steps * layers and {e["bytes_sent"] for e in gathers} == {world * 8}
    probe_by_seq = {(e["rank"], e["seq"]): e for e in probe}
    assert set(kineto) == set(probe_by_seq)
    for key, p in probe_by_seq.items():
        k = kineto[key]
        assert (k["layer"], k["phase"]) == (p["layer"], p["phase"]), key
        assert (
            k["send_bytes_per_peer"] == p["send_bytes_per_peer"]
            and k["recv_bytes_per_peer"] == p["recv_bytes_per_peer"]
        )
    fr = {(e["rank"], e["seq"]): e for e in _events(client, fr_run, "fr") if e["collective"] == "all_to_all"}
    assert set(fr) == set(probe_by_seq)
    for key, p in probe_by_seq.items():
        assert (fr[key]["bytes_sent"], fr[key]["bytes_recv"]) == (p["bytes_sent"], p["bytes_recv"]), key

    # -- another user's token cannot read or write this run ----------------------------------------
    mallory = IngestClient(base, other_token)
    status, body = mallory.post_events(
        run_id, b'{"rank": 0, "start_ns": 1795989557414430475, "end_ns": 1795989557414430476}'
    )
    assert status == 404 and body["field"] == "run"  # not hers to see: as if it did not exist
