"""Request bodies are refused before they are paid for, through the real server (``python -m
fabricmon.serve``: Daphne with the body guard): an unauthenticated 2 GB POST to the events endpoint
is answered 401 while the client is still sending, with the server's peak RSS within 50 MB; an
authenticated over-limit body gets a 413 naming the limit, with or without Content-Length; an
invalid token is refused before the body is read. Before (plain Daphne), the body was buffered
first: 10.4 s and 2.2 GB RSS for the unauthenticated case. The time to the answer is measured by
bench/body_guard.py, not asserted here."""

from __future__ import annotations

import ast
import asyncio
import json

import pytest
from asgi_server import live_server
from body_sender import post_body, reset_peak, status_kb

from fabricmon.jobs.body_guard import BodyGuard

pytestmark = pytest.mark.integration
GB2 = 2 << 30
LIMIT = 32 * 1024 * 1024
UPLOAD_LIMIT = 8 * 1024 * 1024

SETUP = """
from django.contrib.auth import get_user_model
from fabricmon.jobs.runs import create_run
from fabricmon.jobs.tokens import issue_token
user = get_user_model().objects.create_user("guarded")
print(repr((create_run(user, "guarded", world_size=4).pk, issue_token(user, "g")[1])))
"""


@pytest.fixture(scope="module")
def stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    srv = live_server(tmp_path_factory.mktemp("guard"), redis_url,
                      FABRICMON_UPLOAD_MAX_BYTES=str(UPLOAD_LIMIT))
    run, token = ast.literal_eval(srv.manage("shell", "-c", SETUP).strip().splitlines()[-1])
    yield srv, run, token
    srv.stop()


def _measured(srv, path: str, size: int, headers: dict[str, str], chunked: bool = False):  # type: ignore[no-untyped-def]
    pid = srv.proc.pid
    reset_peak(pid)
    before = status_kb(pid, "VmRSS")
    answer = post_body(srv.url, path, size, headers, chunked=chunked)
    grew_mb = (status_kb(pid, "VmHWM") - before) / 1024
    return answer, json.loads(answer.body), grew_mb


@pytest.mark.parametrize("chunked", [False, True])
def test_an_unauthenticated_2_gb_post_is_refused_before_its_body_is_read(stack, chunked) -> None:  # type: ignore[no-untyped-def]
    srv, run, _ = stack
    answer, body, grew_mb = _measured(srv, f"/jobs/api/runs/{run}/events", GB2, {}, chunked)
    assert answer.status == 401 and body["field"] == "Authorization", (answer, body)
    assert grew_mb <= 50, grew_mb
    assert answer.sent_bytes < GB2 // 8, answer.sent_bytes  # answered while the client was sending


def test_an_invalid_token_is_refused_before_the_body_is_read(stack) -> None:  # type: ignore[no-untyped-def]
    srv, run, _ = stack
    answer, body, grew_mb = _measured(srv, f"/jobs/api/runs/{run}/events", LIMIT - 1,
                                      {"Authorization": "Bearer fmj_00000000_not-a-token"})
    assert answer.status == 401 and "invalid" in body["error"], (answer, body)
    assert grew_mb <= 50, grew_mb


@pytest.mark.parametrize("chunked", [False, True])
def test_an_authenticated_over_limit_body_is_a_413_naming_the_limit(stack, chunked) -> None:  # type: ignore[no-untyped-def]
    srv, run, token = stack
    answer, body, grew_mb = _measured(srv, f"/jobs/api/runs/{run}/events", GB2 if not chunked else 3 * LIMIT,
                                      {"Authorization": f"Bearer {token}"}, chunked)
    assert answer.status == 413 and str(LIMIT) in body["error"] and body["field"] == "body", (answer, body)
    assert grew_mb <= 50, grew_mb


def test_an_upload_over_its_cap_is_a_413_before_it_is_stored(stack) -> None:  # type: ignore[no-untyped-def]
    srv, run, token = stack
    answer, body, _ = _measured(srv, f"/jobs/api/runs/{run}/uploads", 3 * UPLOAD_LIMIT,
                                {"Authorization": f"Bearer {token}"})
    assert answer.status == 413 and str(UPLOAD_LIMIT) in body["error"], (answer, body)


def test_a_chunked_batch_within_the_limit_is_stored(stack) -> None:  # type: ignore[no-untyped-def]
    import socket
    import urllib.parse

    srv, run, token = stack
    line = json.dumps({"id": "c1", "rank": 1, "start_ns": 1_795_987_668_367_402_543,
                       "end_ns": 1_795_987_668_367_403_543, "phase": "dispatch",
                       "send_bytes_per_peer": {"0": 5}}).encode()
    u = urllib.parse.urlsplit(srv.url)
    with socket.create_connection((u.hostname, u.port), timeout=30) as sock:
        sock.sendall(
            f"POST /jobs/api/runs/{run}/events HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".encode()
            + b"%x\r\n%s\r\n0\r\n\r\n" % (len(line), line)
        )
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    assert raw.startswith(b"HTTP/1.1 200"), raw[:300]
    assert json.loads(raw.split(b"\r\n\r\n", 1)[1])["stored"] == 1


# --- the ASGI middleware on its own (servers that stream bodies call it before any body byte) ---


def _run_guard(path: str, headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> tuple[list, int]:
    sent: list[dict] = []
    reads = 0
    calls = []

    async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        calls.append(scope["path"])
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect" or not msg.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive() -> dict:
        nonlocal reads
        reads += 1
        body = chunks[min(reads - 1, len(chunks) - 1)]
        return {"type": "http.request", "body": body, "more_body": reads < len(chunks)}

    async def send(msg: dict) -> None:
        sent.append(msg)

    scope = {"type": "http", "method": "POST", "path": path, "headers": headers}
    asyncio.run(BodyGuard(app)(scope, receive, send))
    return sent, reads


def test_the_middleware_refuses_by_the_head_without_reading_the_body() -> None:
    sent, reads = _run_guard("/jobs/api/runs/1/events", [(b"content-length", b"2147483648")], [b"x"])
    assert sent[0]["status"] == 401 and reads == 0
    sent, reads = _run_guard("/jobs/api/runs/1/events", [(b"content-length", "²".encode())], [b"x"])
    assert sent[0]["status"] == 400 and reads == 0
    sent, reads = _run_guard("/accounts/login/", [(b"content-length", str(1 << 30).encode())], [b"x"])
    assert sent[0]["status"] == 413 and reads == 0


def test_the_middleware_cuts_a_streamed_body_off_at_its_limit() -> None:
    chunks = [b"x" * (1 << 20)] * 40  # 40 MiB with no Content-Length to a page (limit 8 MiB)
    sent, reads = _run_guard("/accounts/login/", [(b"transfer-encoding", b"chunked")], chunks)
    assert [m.get("status") for m in sent if m["type"] == "http.response.start"] == [413]
    assert reads <= 10  # stopped at the limit, not after 40 chunks
