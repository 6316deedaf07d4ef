"""The ingest API against bad input: every case gets a clear 4xx naming the problem, valid lines
beside bad ones are stored, re-sent batches are idempotent, and nothing in a pickle executes."""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from collectors.traces import TraceFormatError, read_events
from collectors.traces.safe_pickle import ForbiddenPickle, loads_plain
from fabricmon.jobs import blocks
from fabricmon.jobs.models import EventBlock, EventIdSet, Run, TrafficMatrix
from fabricmon.jobs.tokens import issue_token, revoke_token

T0 = 1_795_987_668_367_402_543


def _event(i: int, **over) -> dict:
    e = {
        "id": f"e{i}",
        "rank": i % 4,
        "step": 0,
        "layer": 1,
        "phase": "dispatch",
        "collective": "all_to_all_single",
        "start_ns": T0 + i,
        "end_ns": T0 + i + 1000,
        "source": "probe",
        "send_bytes_per_peer": {"0": 10, "1": 20, "2": 30, "3": 40},
        "recv_bytes_per_peer": {"0": 5, "1": 5, "2": 5, "3": 5},
    }
    e.update(over)
    return e


def _ndjson(events: list) -> bytes:
    return b"\n".join(e if isinstance(e, bytes) else json.dumps(e).encode() for e in events)


@pytest.fixture
def api(db):
    users = get_user_model()
    alice, bob = users.objects.create_user("alice"), users.objects.create_user("bob")
    _, token = issue_token(alice)
    bob_row, bob_token = issue_token(bob)
    client = Client()
    run = Run.objects.create(owner=alice, name="r1")
    bob_run = Run.objects.create(owner=bob, name="bob's")

    def post(path: str, body: bytes, tok: str | None = token, ctype: str = "application/x-ndjson"):
        headers = {"HTTP_AUTHORIZATION": f"Bearer {tok}"} if tok else {}
        return client.post(path, body, content_type=ctype, **headers)

    return {
        "post": post,
        "run": run,
        "bob_run": bob_run,
        "token": token,
        "bob_row": bob_row,
        "bob_token": bob_token,
        "client": client,
    }


def test_a_batch_with_bad_lines_keeps_the_valid_ones_and_names_each_bad_line(api) -> None:
    run = api["run"]
    lines = [
        _event(1),
        b'{"id": "trunc", "rank": 1, "start_ns": 17959',  # truncated JSON
        _event(3, rank="two"),  # wrong type
        _event(4, phase="shuffle"),  # unknown phase
        _event(5, send_bytes_per_peer={"0": -8}),  # negative size
        _event(6, bytes_sent=-1, send_bytes_per_peer=None),  # negative total
        _event(7, start_ns=1_795_987_668),  # seconds, not ns
        _event(8),
    ]
    resp = api["post"](f"/jobs/api/runs/{run.pk}/events", _ndjson(lines))
    assert resp.status_code == 422
    body = resp.json()
    assert body["stored"] == 2
    rejected = {r["line"]: (r["field"], r["reason"]) for r in body["rejected"]}
    assert set(rejected) == {2, 3, 4, 5, 6, 7}
    assert "invalid JSON" in rejected[2][1]
    assert rejected[3][0] == "rank" and "integer" in rejected[3][1]
    assert rejected[4][0] == "phase" and "shuffle" in rejected[4][1]
    assert rejected[5][0] == "send_bytes_per_peer" and "non-negative" in rejected[5][1]
    assert rejected[6][0] == "bytes_sent"
    assert rejected[7][0] == "start_ns"
    assert sorted(blocks.event_ids(run)) == ["e1", "e8"]


def test_resending_a_batch_is_idempotent_and_matrices_count_once(api) -> None:
    run = api["run"]
    batch = _ndjson([_event(i) for i in range(8)])
    first = api["post"](f"/jobs/api/runs/{run.pk}/events", batch).json()
    again = api["post"](f"/jobs/api/runs/{run.pk}/events", batch).json()
    assert (first["stored"], again["stored"], again["duplicates"]) == (8, 0, 8)
    m = TrafficMatrix.objects.get(run=run, step=0, layer=1, phase="dispatch")
    sent = m.sent_array()
    assert sent[0].tolist() == [20, 40, 60, 80]  # ranks 0 sent twice (events 0 and 4), counted once each
    assert m.received_array()[:, 0].tolist() == [10, 10, 10, 10]


def test_missing_revoked_and_foreign_tokens_are_refused(api) -> None:
    run, bob_run = api["run"], api["bob_run"]
    path = f"/jobs/api/runs/{run.pk}/events"
    resp = api["post"](path, _ndjson([_event(1)]), tok=None)
    assert resp.status_code == 401 and resp.json()["field"] == "Authorization"
    resp = api["post"](path, _ndjson([_event(1)]), tok="fmj_nothere_abc")
    assert resp.status_code == 401
    resp = api["post"](f"/jobs/api/runs/{bob_run.pk}/events", _ndjson([_event(1)]))
    # (base.access: a run the token's user may not see answers as if it did not exist)
    assert resp.status_code == 404 and resp.json()["field"] == "run"
    revoke_token(api["bob_row"])
    resp = api["post"](f"/jobs/api/runs/{bob_run.pk}/events", _ndjson([_event(1)]), tok=api["bob_token"])
    assert resp.status_code == 401
    assert EventIdSet.objects.count() == 0 and EventBlock.objects.count() == 0


def test_runs_tags_end_and_rank_map(api) -> None:
    post = api["post"]
    resp = post(
        "/jobs/api/runs",
        json.dumps({"name": "mixtral", "tags": ["ep=8", "exp=a"]}).encode(),
        ctype="application/json",
    )
    assert resp.status_code == 201
    run_id = resp.json()["id"]
    assert post("/jobs/api/runs", b'{"tags": []}', ctype="application/json").json()["field"] == "name"
    resp = post(f"/jobs/api/runs/{run_id}/tags", b'{"tags": ["b", "a", "a"]}', ctype="application/json")
    assert resp.json()["tags"] == ["a", "b"]
    assert (
        post(f"/jobs/api/runs/{run_id}/tags", b'{"tags": [1]}', ctype="application/json").status_code == 400
    )
    ranks = [
        {
            "rank": 0,
            "host": "h0",
            "local_rank": 0,
            "nic": "mlx5_0",
            "switch": "leaf1",
            "switch_port": "Ethernet1",
        },
        {"rank": 1, "host": ""},
    ]
    resp = post(f"/jobs/api/runs/{run_id}/ranks", json.dumps(ranks).encode(), ctype="application/json")
    assert (
        resp.status_code == 422
        and resp.json()["stored"] == 1
        and resp.json()["rejected"][0]["field"] == "host"
    )
    assert post(f"/jobs/api/runs/{run_id}/end", b"").json()["state"] == "finished"


def test_openapi_and_clock(api) -> None:
    client = api["client"]
    schema = client.get("/jobs/api/openapi.json").json()
    assert "/jobs/api/runs/{run_id}/events" in schema["paths"]
    assert client.get("/jobs/api/clock").json()["server_ns"] > T0 // 2


def test_uploads_report_format_errors(api) -> None:
    run = api["run"]
    client = api["client"]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api['token']}"}
    bad = io.BytesIO(b'{"traceEvents": [{"ph": "X", "name": "a"')
    bad.name = "t.json"
    resp = client.post(f"/jobs/api/runs/{run.pk}/uploads", {"kind": "kineto", "file": bad}, **auth)
    assert resp.status_code == 422 and resp.json()["field"] == "file"  # a well-formed request, a bad file
    evil = io.BytesIO(pickle.dumps(_Evil()))
    evil.name = "fr_rank0"
    resp = client.post(
        f"/jobs/api/runs/{run.pk}/uploads", {"kind": "fr_pickle", "rank": "0", "file": evil}, **auth
    )
    assert (resp.status_code == 422 and "posix.system" in resp.json()["error"]) or "os.system" in resp.json()[
        "error"
    ]
    assert not os.path.exists("/tmp/fabricmon-pwned")


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/fabricmon-pwned",))


def test_restricted_unpickler_loads_plain_data_only() -> None:
    data = {"entries": [{"a": (1, 2.5, None, True, "x", b"y")}]}
    assert loads_plain(pickle.dumps(data)) == data
    with pytest.raises(ForbiddenPickle):
        loads_plain(pickle.dumps(_Evil()))
    with pytest.raises(ForbiddenPickle):
        loads_plain(pickle.dumps(Run))


def test_kineto_reader_handles_gzip_and_old_absolute_times() -> None:
    trace = {
        "distributedInfo": {"rank": 2, "world_size": 2, "pg_config": []},
        "traceEvents": [
            {
                "ph": "X",
                "cat": "kernel",
                "name": "ncclDevKernel_SendRecv",
                "pid": 0,
                "tid": 7,
                "ts": 1683564901554112.5,
                "dur": 10.0,
                "args": {
                    "Collective name": "all_to_allv",
                    "In msg nelems": 24,
                    "Out msg nelems": 16,
                    "Group size": 2,
                    "dtype": "BFloat16",
                    "In split size": "[1, 2]",
                    "Out split size": "[1, 1]",
                    "Process Group Name": "1",
                    "Process Group Ranks": "[4, 6]",
                    "Seq": 7,
                },
            },
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": "moe/layer3/combine",
                "pid": 0,
                "tid": 7,
                "ts": 1683564901554100.0,
                "dur": 50.0,
            },
        ],
    }
    (event,) = read_events("kineto", io.BytesIO(gzip.compress(json.dumps(trace).encode())))
    assert event["start_ns"] == 1683564901554112500 and event["end_ns"] == 1683564901554122500
    assert (event["layer"], event["phase"], event["seq"], event["time_kind"]) == (
        3,
        "combine",
        7,
        "gpu_kernel",
    )
    assert event["send_bytes_per_peer"] == {"4": 16, "6": 32} and event["recv_bytes_per_peer"] == {
        "4": 16,
        "6": 16,
    }
    with pytest.raises(TraceFormatError):
        list(read_events("kineto", io.BytesIO(b'{"traceEvents": [')))


def test_inspector_lines() -> None:
    lines = [
        {
            "header": {"id": "0x7f", "rank": 2, "n_ranks": 8},
            "metadata": {"dump_timestamp_us": 1748030377748202, "hostname": "h"},
            "coll_perf": {
                "coll": "AllReduce",
                "coll_sn": 1407,
                "coll_msg_size_bytes": 1024,
                "coll_exec_time_us": 61,
                "coll_timing_source": "kernel_gpu",
            },
        },
        {
            "header": {"id": "0x7f", "rank": 2},
            "metadata": {"dump_timestamp_us": 1748030377748202},
            "p2p_perf": {
                "p2p": "Send",
                "p2p_sn": 12,
                "p2p_peer": 5,
                "p2p_msg_size_bytes": 2048,
                "p2p_exec_time_us": 210,
            },
        },
    ]
    coll, p2p = read_events("inspector", io.BytesIO(b"\n".join(json.dumps(x).encode() for x in lines)))
    assert (
        coll["phase"] == "allreduce"
        and coll["end_ns"] - coll["start_ns"] == 61_000
        and coll["bytes_sent"] == 1024
    )
    assert p2p["phase"] == "send" and p2p["send_bytes_per_peer"] == {"5": 2048}


@pytest.mark.parametrize(
    "over",
    [
        {},
        {"step": None, "layer": None},
        {"pg_ranks": [0, 1, 2, 3], "seq": 9, "host": "h"},
        {"clock_offset_ns": -5},
        {"bytes_sent": 100},
        {"recv_bytes_per_peer": {}},
        {"collective": ""},
    ],
)
def test_fast_and_careful_validation_agree(over) -> None:
    from fabricmon.jobs.validation import _careful_row, _fast_row

    obj = {**_event(3), **over}
    fast = _fast_row(obj, 7)
    assert fast is None or fast == _careful_row(obj, 7)
    assert _fast_row(_event(3), 7) == _careful_row(_event(3), 7)


def test_oversized_batch_is_refused_with_413(api, monkeypatch) -> None:
    from fabricmon.jobs import api as api_module

    monkeypatch.setattr(api_module, "MAX_BATCH_BYTES", 100)
    resp = api["post"](f"/jobs/api/runs/{api['run'].pk}/events", _ndjson([_event(i) for i in range(5)]))
    assert resp.status_code == 413 and resp.json()["field"] == "body"
    assert EventIdSet.objects.count() == 0 and EventBlock.objects.count() == 0
