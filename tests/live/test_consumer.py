"""The fabric WebSocket against the real ASGI application (auth + Origin stack) and real Redis.

Frames are appended to the live window the way collectors do (live_window.append); the socket is
driven with Channels' WebsocketCommunicator.
"""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, User
from django.test import Client

from fabricmon.asgi import application
from fabricmon.base import sockets
from fabricmon.core.telemetry.frames import Frame
from fabricmon.live import messages, wire
from fabricmon.live.stream import MAX_IN_FLIGHT, ClientStalledError, FabricStream
from fabricmon.telemetry import live_window

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
GOOD_ORIGIN = b"http://127.0.0.1"
N_PORTS = 64


def session_cookie(username: str, role: str | None = "operators") -> bytes:
    user = User.objects.create_user(username, password="pw-not-secret")
    if role:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def append_frame(r, fabric: str, util: float, *, hot: int = 5, ts_ns: int | None = None) -> Frame:
    values = np.full(N_PORTS, util, dtype=np.float32)
    values[hot] = 0.9
    values[7] = np.nan
    frame = Frame(fabric, "topoA", ts_ns or time.time_ns(), 1.0, {"util": values, "out_bps": values * 4e11})
    live_window.append(r, frame, max_frames=600)
    return frame


def hottest(codes: np.ndarray) -> int:
    """Index of the highest value, ignoring no-data (255)."""
    return int(np.argmax(np.where(codes == messages.NO_DATA, -1, codes.astype(np.int16))))


def run(coro):
    """Drive a scenario on a fresh event loop in this thread. Not asgiref's async_to_sync: under
    xdist its per-thread executor machinery once deadlocked here (a refused socket's loop waiting
    forever to cancel a task whose thread-sensitive work went to a stale executor). Thread-
    sensitive database work of the app then runs in asgiref's single sync thread instead."""
    return asyncio.run(coro)


def communicator(fabric: str, *, origin: bytes | None = GOOD_ORIGIN, cookie: bytes | None = None, query: str = ""):
    headers = [(b"host", b"127.0.0.1")]
    if origin is not None:
        headers.append((b"origin", origin))
    if cookie is not None:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, f"/ws/fabric/{fabric}/{query}", headers=headers)


async def open_socket(comm: WebsocketCommunicator) -> tuple[bool, int | None]:
    connected, code = await comm.connect(timeout=20)
    if connected:
        await comm.disconnect()
    return connected, code


async def refusal_code(comm: WebsocketCommunicator) -> int:
    """A refused socket is accepted, then closed with the code (a close before accept reaches the
    browser as 1006, and the page could not send the user to the login form)."""
    connected, _ = await comm.connect(timeout=20)
    assert connected, "refused before accept: the browser would see 1006"
    out = await comm.receive_output(timeout=20)
    assert out["type"] == "websocket.close", out
    await comm.wait()
    return int(out["code"])


def test_unauthenticated_socket_is_refused(fabric_name: str) -> None:
    assert run(refusal_code(communicator(fabric_name))) == sockets.CLOSE_UNAUTHENTICATED


@pytest.mark.parametrize("origin", [b"http://evil.example", b"null", b"", None, b"http://127.0.0.1.evil.example"])
def test_foreign_or_missing_origin_is_refused_even_when_logged_in(fabric_name: str, origin: bytes | None) -> None:
    cookie = session_cookie("op")
    connected, _ = run(open_socket(communicator(fabric_name, origin=origin, cookie=cookie)))
    assert not connected


def test_user_without_a_role_is_refused(fabric_name: str) -> None:
    cookie = session_cookie("nobody", role=None)
    assert run(refusal_code(communicator(fabric_name, cookie=cookie))) == sockets.CLOSE_FORBIDDEN


def test_operator_gets_window_then_one_column_per_frame(fabric_name: str, redis_client) -> None:
    cookie = session_cookie("op")
    for i in range(3):
        append_frame(redis_client, fabric_name, 0.1 * i, ts_ns=time.time_ns() - (3 - i) * 10**9)

    async def scenario() -> None:
        comm = communicator(fabric_name, cookie=cookie)
        connected, _ = await comm.connect(timeout=20)
        assert connected
        hello = json.loads(await comm.receive_from(timeout=20))
        assert hello["type"] == "hello" and hello["n_ports"] == N_PORTS and hello["metric"] == "util"
        assert hello["topology_version"] == "topoA" and hello["metrics"] == ["out_bps", "util"]
        kind, _, seq, ts_ms, codes = wire.decode_message(await comm.receive_from(timeout=20))
        assert kind == messages.KIND_WINDOW and codes.shape == (3, N_PORTS)
        assert codes[:, 7].tolist() == [255, 255, 255]  # no data stays no data
        assert codes[2, 5] == round(0.9 * 254)
        await comm.send_to(text_data=json.dumps({"type": "ack", "seq": seq}))

        frame = append_frame(redis_client, fabric_name, 0.5, hot=11)
        blob = await comm.receive_from(timeout=20)
        assert len(blob) == messages.COLUMN_HEADER_BYTES + N_PORTS
        kind, _, seq2, ts_ms, codes = wire.decode_message(blob)
        assert kind == messages.KIND_COLUMN and seq2 == seq + 1
        assert ts_ms[0] == frame.ts_ns / 1e6
        assert hottest(codes[0]) == 11 and codes[0, 7] == messages.NO_DATA
        await comm.disconnect()

    run(scenario())


def test_slow_client_gets_the_newest_frame_and_older_ones_are_dropped(fabric_name: str, redis_client) -> None:
    cookie = session_cookie("op")
    append_frame(redis_client, fabric_name, 0.1)

    async def scenario() -> None:
        comm = communicator(fabric_name, cookie=cookie)
        assert (await comm.connect(timeout=20))[0]
        await comm.receive_from(timeout=20)  # hello
        _, _, window_seq, _, _ = wire.decode_message(await comm.receive_from(timeout=20))
        # The window is unacknowledged: only MAX_IN_FLIGHT - 1 more message may be in flight.
        for i in range(MAX_IN_FLIGHT - 1):
            append_frame(redis_client, fabric_name, 0.2, hot=20 + i)
            await comm.receive_from(timeout=20)
        for hot in (30, 31, 32, 33):  # a burst the client does not read
            append_frame(redis_client, fabric_name, 0.2, hot=hot)
            time.sleep(0.05)
        assert await comm.receive_nothing(timeout=0.5)
        await comm.send_to(text_data=json.dumps({"type": "ack", "seq": window_seq + MAX_IN_FLIGHT - 1}))
        _, _, _, _, codes = wire.decode_message(await comm.receive_from(timeout=20))
        assert hottest(codes[0]) == 33  # the newest, not the oldest of the burst
        assert await comm.receive_nothing(timeout=0.3)  # …and the dropped ones never follow
        await comm.disconnect()

    run(scenario())


def test_subscribe_switches_metric_with_a_new_window(fabric_name: str, redis_client) -> None:
    cookie = session_cookie("op")
    append_frame(redis_client, fabric_name, 0.1)

    async def scenario() -> None:
        comm = communicator(fabric_name, cookie=cookie, query="?metric=util")
        assert (await comm.connect(timeout=20))[0]
        await comm.receive_from(timeout=20)
        await comm.receive_from(timeout=20)
        await comm.send_to(text_data=json.dumps({"type": "subscribe", "metric": "out_bps"}))
        hello = json.loads(await comm.receive_from(timeout=20))
        # bit rates: linear from 0 to line rate by default (the fixture fabric's ports are 400G)
        assert hello["metric"] == "out_bps" and hello["scale"]["kind"] == "linear"
        assert hello["scale"]["lo"] == 0 and hello["scale"]["hi"] > 0 and hello["scale_kinds"] == ["linear", "log"]
        kind, metric_id, *_ = wire.decode_message(await comm.receive_from(timeout=20))
        assert kind == messages.KIND_WINDOW and metric_id == wire.METRIC_IDS["out_bps"]
        await comm.send_to(text_data=json.dumps({"type": "subscribe", "metric": "out_bps", "scale": "log"}))
        hello = json.loads(await comm.receive_from(timeout=20))
        assert hello["scale"] == wire.scale_of("out_bps", "log")
        await comm.receive_from(timeout=20)
        await comm.send_to(text_data=json.dumps({"type": "subscribe", "metric": "nonsense"}))
        err = json.loads(await comm.receive_from(timeout=20))
        assert err["type"] == "error" and "nonsense" in err["message"]
        await comm.disconnect()

    run(scenario())


def test_first_frame_of_an_empty_fabric_resynchronises(fabric_name: str, redis_client) -> None:
    cookie = session_cookie("op")

    async def scenario() -> None:
        comm = communicator(fabric_name, cookie=cookie)
        assert (await comm.connect(timeout=20))[0]
        hello = json.loads(await comm.receive_from(timeout=20))
        assert hello["n_ports"] == 0
        await comm.receive_from(timeout=20)
        append_frame(redis_client, fabric_name, 0.3)
        hello = json.loads(await comm.receive_from(timeout=20))
        assert hello["n_ports"] == N_PORTS
        kind, *_, codes = wire.decode_message(await comm.receive_from(timeout=20))
        assert kind == messages.KIND_WINDOW and codes.shape == (1, N_PORTS)
        await comm.disconnect()

    run(scenario())


def test_a_client_that_stops_acknowledging_is_closed_and_costs_one_pending_frame(fabric_name, redis_client, redis_url) -> None:
    sent: list[bytes] = []

    async def scenario() -> None:
        async def keep_text(_msg) -> None:
            return None

        async def keep_bytes(blob: bytes) -> None:
            sent.append(blob)

        r = aioredis.Redis.from_url(redis_url, socket_timeout=30)
        stream = FabricStream(r, fabric_name, "util", keep_text, keep_bytes, stall_close_s=1.0)
        append_frame(redis_client, fabric_name, 0.1)
        task = asyncio.create_task(stream.follow(block_ms=200))
        for i in range(12):  # keeps coming; the client never acks
            append_frame(redis_client, fabric_name, 0.2, hot=20 + i)
            await asyncio.sleep(0.15)
            if task.done():
                break
        with pytest.raises(ClientStalledError):
            await asyncio.wait_for(task, 5)
        assert stream.seq - stream.acked <= MAX_IN_FLIGHT  # never more in flight than allowed
        assert len(sent) == MAX_IN_FLIGHT  # the window + one column; everything else was dropped
        await r.aclose()

    run(scenario())


def test_a_selected_runs_phase_markers_come_over_the_socket_all_then_only_new(fabric_name, redis_client, settings) -> None:
    """The run selector's markers on the heatmap's socket (MarkerFeed): every marker of the window
    on selection, then only the new ones after more events are ingested; none after deselecting."""
    from phase_events import GAP_MS, phase_ndjson

    from fabricmon.jobs import ingest, runs

    settings.FABRICMON_PHASES_TICK_S = 0.2
    cookie = session_cookie("op")
    t0_ns = time.time_ns() - 10**9
    append_frame(redis_client, fabric_name, 0.1, ts_ns=t0_ns + 2 * 10**9)
    run_ = runs.create_run(User.objects.get(username="op"), "markers", fabric=fabric_name, world_size=4)
    assert not ingest.ingest_ndjson(run_, phase_ndjson(t0_ns), clock_offset_ns=2_000_000).rejected

    async def text_of_type(comm: WebsocketCommunicator, kind: str) -> dict:
        while True:
            msg = await comm.receive_output(timeout=20)
            if msg.get("text") and json.loads(msg["text"])["type"] == kind:
                return json.loads(msg["text"])

    async def scenario() -> None:
        comm = communicator(fabric_name, cookie=cookie)
        assert (await comm.connect(timeout=20))[0]
        await comm.send_to(text_data=json.dumps({"type": "markers", "run": run_.pk}))
        first = await text_of_type(comm, "markers")
        assert first["reset"] and first["run"] == run_.pk and first["verdict"] == "pass", first["reason"]
        assert len(first["markers"]) == 12 and first["markers"][0]["phase"] == "dispatch"
        more = phase_ndjson(t0_ns + 12 * GAP_MS * 1_000_000, steps=2, first_step=3)
        await database_sync_to_async(ingest.ingest_ndjson)(run_, more, clock_offset_ns=2_000_000)
        later = await text_of_type(comm, "markers")
        assert not later["reset"] and sorted({m["step"] for m in later["markers"]}) == [3, 4]
        assert len(later["markers"]) == 8
        await comm.send_to(text_data=json.dumps({"type": "markers", "run": None}))
        await database_sync_to_async(ingest.ingest_ndjson)(
            run_, phase_ndjson(t0_ns + 20 * GAP_MS * 1_000_000, steps=1, first_step=5), clock_offset_ns=2_000_000
        )
        assert await comm.receive_nothing(timeout=1.0)
        await comm.disconnect()

    run(scenario())
