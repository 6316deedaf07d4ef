"""Hostile input against the ingest and run endpoints, through the real ASGI server (Daphne): each
case gets a 4xx naming the problem (line and field where there is one), valid lines beside a bad
one are stored, and nothing answers 5xx. The cases are the ones issue 13's fuzzing found on main:
``"phase": []`` (a 500 for the whole batch), a deeply nested peer map (RecursionError), tags as
int/null/"abc", ``?layer=²``, upload ``rank=²``/10**30, rank-map ranks above int64, string
times, an empty body answering 200 ``{"lines": 1}``, over-long fields, and ranks beyond the run's
``world_size`` (one 1 KB line with rank 3000 wrote 720 MB of matrices)."""

from __future__ import annotations

import ast
import http.client
import json
import urllib.parse
from typing import Any

import pytest
from asgi_server import LiveServer, live_server

pytestmark = pytest.mark.integration
T0 = 1_795_987_668_367_402_543

SETUP = """
from django.contrib.auth import get_user_model
from fabricmon.jobs.runs import create_run
from fabricmon.jobs.tokens import issue_token
user = get_user_model().objects.create_user("hostile", password="pw")
sized = create_run(user, "sized", world_size=8)
bare = create_run(user, "bare")
print(repr((sized.pk, bare.pk, issue_token(user, "hostile")[1])))
"""

MATRICES = """
from fabricmon.jobs.models import TrafficMatrix
print(repr(sorted({{m.n_ranks for m in TrafficMatrix.objects.filter(run_id={run})}})))
"""


@pytest.fixture(scope="module")
def stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    srv = live_server(tmp_path_factory.mktemp("hostile"), redis_url)
    sized, bare, token = ast.literal_eval(srv.manage("shell", "-c", SETUP).strip().splitlines()[-1])
    yield {"server": srv, "sized": sized, "bare": bare, "token": token}
    srv.stop()


def call(
    srv: LiveServer, method: str, path: str, body: bytes | None = None, token: str | None = None,
    ctype: str = "application/json", headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    url = urllib.parse.urlsplit(srv.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        head = {"Content-Type": ctype, **(headers or {})}
        if token:
            head["Authorization"] = f"Bearer {token}"
        conn.request(method, path, body=body, headers=head)
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    try:
        return resp.status, json.loads(raw)
    except ValueError:
        return resp.status, raw


def event(i: int, **over: Any) -> dict[str, Any]:
    e = {
        "id": f"h{i}", "rank": i % 4, "step": 0, "layer": 1, "phase": "dispatch",
        "start_ns": T0 + i, "end_ns": T0 + i + 1000, "source": "probe",
        "send_bytes_per_peer": {"0": 10, "1": 20, "2": 30, "3": 40},
        "recv_bytes_per_peer": {"0": 5, "1": 5, "2": 5, "3": 5},
    }
    e.update(over)
    return e


def post_events(stack: dict[str, Any], lines: list[Any], run: str = "sized") -> tuple[int, Any]:
    body = b"\n".join(x if isinstance(x, bytes) else json.dumps(x).encode() for x in lines)
    return call(stack["server"], "POST", f"/jobs/api/runs/{stack[run]}/events", body, stack["token"],
                "application/x-ndjson")


def assert_one_bad_line(status: int, body: Any, field: str, stored: int = 2) -> str:
    """The middle line of three is the bad one: named by line and field, the two others stored."""
    assert status == 422, (status, body)
    assert body["stored"] + body["duplicates"] == stored, body
    [bad] = body["rejected"]
    assert bad["line"] == 2 and bad["field"] == field, bad
    return str(bad["reason"])


_unique = iter(range(10_000, 10**9, 10))


def three(**bad: Any) -> list[Any]:
    """A valid line, a line with ``bad`` fields, a valid line (fresh ids for every case)."""
    i = next(_unique)
    return [event(i), event(i + 1, **bad), event(i + 2)]


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"phase": []}, "phase"),  # was TypeError: unhashable type → 500, valid lines lost
        ({"phase": {"a": 1}}, "phase"),
        ({"source": ["probe"]}, "source"),
        ({"time_kind": {}}, "time_kind"),
        ({"start_ns": str(T0)}, "start_ns"),  # string times
        ({"end_ns": "later"}, "end_ns"),
        ({"rank": "3"}, "rank"),
        ({"layer": 2**40}, "layer"),  # the matrices' layer column is int32
        ({"collective": "x" * 41}, "collective"),  # field lengths
        ({"pg": "p" * 65}, "pg"),
        ({"host": "h" * 201}, "host"),
        ({"id": "i" * 81}, "id"),
        ({"send_bytes_per_peer": {"²": 5}}, "send_bytes_per_peer"),
        ({"send_bytes_per_peer": {"9" * 5000: 5}}, "send_bytes_per_peer"),  # int() refuses 4,300+ digits
    ],
)
def test_a_bad_field_is_named_and_the_lines_beside_it_are_stored(stack, bad, field) -> None:  # type: ignore[no-untyped-def]
    assert_one_bad_line(*post_events(stack, three(**bad)), field)


@pytest.mark.parametrize("depth", [500, 1_500, 100_000])
def test_deep_nesting_in_a_peer_map_is_a_line_error(stack, depth) -> None:  # type: ignore[no-untyped-def]
    # was RecursionError (a 500): msgspec gives up past ~1,000 levels, repr() of the value too
    i = next(_unique)
    nested = "[" * depth + "]" * depth
    line = json.dumps(event(i + 1)).replace('"0": 10', f'"0": {nested}').encode()
    status, body = post_events(stack, [event(i), line, event(i + 2)])
    reason = assert_one_bad_line(status, body, body["rejected"][0]["field"])
    assert len(reason) < 300  # the value is described, not echoed


def test_ranks_beyond_the_world_size_are_refused_and_make_no_big_matrix(stack) -> None:  # type: ignore[no-untyped-def]
    srv = stack["server"]
    reason = assert_one_bad_line(*post_events(stack, three(rank=3000)), "rank")
    assert "0..7" in reason and "world_size" in reason
    assert_one_bad_line(*post_events(stack, three(send_bytes_per_peer={"0": 1, "3000": 1})),
                        "send_bytes_per_peer")
    assert_one_bad_line(*post_events(stack, three(recv_bytes_per_peer={"8": 1})), "recv_bytes_per_peer")
    # a run without a world_size is bounded by FABRICMON_MAX_RANKS (1024)
    assert_one_bad_line(*post_events(stack, three(rank=3000), run="bare"), "rank")
    for run in ("sized", "bare"):
        sizes = ast.literal_eval(srv.manage("shell", "-c", MATRICES.format(run=stack[run])).strip().splitlines()[-1])
        assert sizes == [4], sizes  # the valid lines' 4 ranks, never 3001


@pytest.mark.parametrize("body", [b"", b"\n\n", b"   \n"])
def test_an_empty_batch_is_a_400_not_200(stack, body) -> None:  # type: ignore[no-untyped-def]
    status, answer = call(stack["server"], "POST", f"/jobs/api/runs/{stack['sized']}/events", body,
                          stack["token"], "application/x-ndjson")
    assert status == 400 and answer["field"] == "body", (status, answer)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"name": "t", "tags": 5}, "tags"),
        ({"name": "t", "tags": None}, "tags"),
        ({"name": "t", "tags": "abc"}, "tags"),  # was stored as ["a", "b", "c"]
        ({"name": "t", "tags": [[]]}, "tags"),
        ({"name": "t", "fabric": "f" * 101}, "fabric"),
        ({"name": "t", "world_size": 10**30}, "world_size"),  # a float after orjson
        ({"name": "t", "world_size": 2**62}, "world_size"),  # was an SQLite overflow
        ({"name": "n" * 201}, "name"),
        ([1, 2], "body"),
    ],
)
def test_run_creation_names_the_bad_field(stack, payload, field) -> None:  # type: ignore[no-untyped-def]
    status, body = call(stack["server"], "POST", "/jobs/api/runs", json.dumps(payload).encode(), stack["token"])
    assert status == 400 and body["field"] == field, (status, body)


def test_tags_and_end_refuse_bad_bodies(stack) -> None:  # type: ignore[no-untyped-def]
    srv, run, tok = stack["server"], stack["sized"], stack["token"]
    for payload in (b'{"tags": 5}', b'{"tags": null}', b'"abc"', b"", b"{"):
        status, body = call(srv, "POST", f"/jobs/api/runs/{run}/tags", payload, tok)
        assert status == 400, (payload, status, body)
    status, body = call(srv, "POST", f"/jobs/api/runs/{run}/end", b'{"state": []}', tok)
    assert status == 400 and body["field"] == "state", body


@pytest.mark.parametrize("query", ["layer=%C2%B2", "step=%C2%B2", "layer=1" + "0" * 30, "step=abc", "layer=-5",
                                   "phase=", "phase=dispatch_fwdx"])  # (an empty phase: schemathesis, 10,750 cases)
def test_matrix_query_parameters_are_checked(stack, query) -> None:  # type: ignore[no-untyped-def]
    status, body = call(stack["server"], "GET", f"/jobs/api/runs/{stack['sized']}/matrix?{query}",
                        token=stack["token"])
    assert status == 400 and body["field"] == query.split("=")[0], (status, body)


@pytest.mark.parametrize(("query", "field"), [("phase=%5B%5D", "phase"), ("source=", "source")])
def test_export_filters_are_checked(stack, query, field) -> None:  # type: ignore[no-untyped-def]
    status, body = call(stack["server"], "GET", f"/jobs/api/runs/{stack['sized']}/events?{query}",
                        token=stack["token"])
    assert status == 400 and body["field"] == field, (status, body)


def _multipart(fields: dict[str, str], file: bytes) -> tuple[bytes, str]:
    boundary = "hostileboundary7"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()]
    head = "".join(parts) + (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="t.json"\r\n'
        "Content-Type: application/json\r\n\r\n"
    )
    return head.encode() + file + f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


@pytest.mark.parametrize(("rank", "status"), [("²", 400), ("1" + "0" * 30, 400), ("-1", 400), ("abc", 400),
                                              ("8", 422)])  # 8: a rank, but not of this run (world_size 8)
def test_an_upload_rank_is_checked(stack, rank, status) -> None:  # type: ignore[no-untyped-def]
    body, ctype = _multipart({"kind": "kineto", "rank": rank}, b'{"traceEvents": []}')
    got, answer = call(stack["server"], "POST", f"/jobs/api/runs/{stack['sized']}/uploads", body,
                       stack["token"], ctype)
    assert got == status and answer["field"] == "rank", (got, answer)


def test_rank_map_entries_out_of_range_are_named_beside_valid_ones(stack) -> None:  # type: ignore[no-untyped-def]
    entries = [
        {"rank": 0, "host": "h0"},
        {"rank": 2**63, "host": "h1"},  # was a database overflow (500)
        {"rank": 9, "host": "h1"},  # beyond world_size 8
        {"rank": 1, "host": "h" * 201},
        {"rank": 2, "host": "h2", "gpu": "g" * 65},
        {"rank": 3, "host": "h3", "local_rank": 2**40},
        {"rank": 4, "host": "h4", "nic": ["x"]},
        {"rank": 5, "host": "h5"},
    ]
    status, body = call(stack["server"], "POST", f"/jobs/api/runs/{stack['sized']}/ranks",
                        json.dumps(entries).encode(), stack["token"])
    assert status == 422 and body["stored"] == 2, (status, body)
    assert [(e["line"], e["field"]) for e in body["rejected"]] == [
        (2, "rank"), (3, "rank"), (4, "host"), (5, "gpu"), (6, "local_rank"), (7, "nic"),
    ]
    status, body = call(stack["server"], "POST", f"/jobs/api/runs/{stack['sized']}/ranks", b"\n \n",
                        stack["token"], "application/x-ndjson")
    assert status == 400 and body["field"] == "body", (status, body)


@pytest.mark.parametrize(
    "content",
    [
        b'{"traceEvents": [[1, 2], "x", 5]}',  # list-shaped items
        b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv", "ts": "12", "dur": 5,'
        b' "pid": 0, "tid": 7, "args": {"correlation": 1}}]}',
        b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv", "ts": 12, "dur": 1e999,'
        b' "pid": 0, "tid": 7, "args": {"correlation": 1}}]}',
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage",  # corrupt gzip
        b'{"traceEvents": [' + b"[" * 5000 + b"]" * 5000 + b"]}",  # nesting
    ],
)
def test_a_hostile_trace_upload_is_a_422_naming_the_problem(stack, content) -> None:  # type: ignore[no-untyped-def]
    body, ctype = _multipart({"kind": "kineto", "rank": "0", "mode": "inline"}, content)
    status, answer = call(stack["server"], "POST", f"/jobs/api/runs/{stack['sized']}/uploads", body,
                          stack["token"], ctype)
    # the file's own problem, named (a 422: the request was well-formed); the importer said
    # which item and field (the string/infinite times and list items were 500s before)
    assert status == 422 and answer["field"] == "file" and answer["error"], (status, answer)
