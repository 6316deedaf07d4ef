"""Both sockets × every role (× own run / a stranger's for the phase socket), through the real ASGI
server (``python -m fabricmon.serve``: Daphne, real Redis, its own SQLite file) and a real RFC 6455
client (tests/asgi_server.py).

A refused socket must be *accepted, then closed* with its code — a handshake refused before accept
reaches the browser as a bare 1006 and the page cannot send the user to the login form:

    fabric socket  anonymous 4401 · no role 4403 · viewer, operator, admin, superuser open
    phase socket   anonymous 4401 · own run open · a stranger's run: operator+ open, else 4404

An open socket is shown to be open by answering a bad message with an ``error`` message.
"""

from __future__ import annotations

import ast
import asyncio
from typing import Any

import pytest
from asgi_server import LiveServer, WebSocket, WebSocketClosedError, live_server

pytestmark = pytest.mark.integration

FABRIC = "acc-sock"
ROLES = ("norole", "viewers", "operators", "admins", "superuser")
SETUP = """
from django.contrib.auth.models import Group, User
from django.test import Client
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.jobs.models import Run
from fabricmon.topology.services import import_fabric
import_fabric(rail_optimized(%(fabric)r, servers=2, gpus_per_server=2, spines=1))
out = {}
stranger = User.objects.create_user("stranger")
out["stranger_run"] = Run.objects.create(owner=stranger, name="stranger-run", fabric=%(fabric)r).pk
for role in %(roles)r:
    u = User.objects.create_user("u-" + role, is_superuser=role == "superuser", is_staff=role == "superuser")
    if role not in ("norole", "superuser"):
        u.groups.add(Group.objects.get(name=role))
    c = Client(); c.force_login(u)
    out[role] = ("sessionid=" + c.cookies["sessionid"].value,
                 Run.objects.create(owner=u, name="run-" + role, fabric=%(fabric)r).pk)
print(repr(out))
"""


@pytest.fixture(scope="module")
def stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    server = live_server(tmp_path_factory.mktemp("access-sockets"), redis_url)
    out = server.manage("shell", "-c", SETUP % {"fabric": FABRIC, "roles": ROLES})
    yield server, ast.literal_eval(out.strip().splitlines()[-1])
    server.stop()


async def outcome(server: LiveServer, path: str, cookie: str | None, bad: dict[str, Any]) -> int | str:
    """The close code of a refused socket, or "open" when it answers a bad message with an error."""
    ws = await WebSocket.connect(f"{server.url.replace('http', 'ws')}{path}", cookie=cookie, origin=server.url)
    try:
        await ws.send(bad)
        for _ in range(20):  # (a snapshot or an overlay may come first)
            msg = await ws.receive(timeout=60, skip_binary=True)
            if msg["type"] == "error":
                return "open"
        return "no error reply"
    except WebSocketClosedError as closed:
        return closed.code if closed.code is not None else "closed without a code (1006)"
    finally:
        await ws.close()


def fabric_path() -> str:
    return f"/ws/fabric/{FABRIC}/"


def phase_path(run_id: int) -> str:
    return f"/ws/phases/runs/{run_id}/"


BAD_FABRIC = {"type": "ack", "seq": "not-a-number"}
BAD_PHASE = {"type": "no-such-message"}


def test_fabric_socket_for_every_role(stack) -> None:  # type: ignore[no-untyped-def]
    server, users = stack
    want: dict[str | None, int | str] = {None: 4401, "norole": 4403} | dict.fromkeys(ROLES[1:], "open")

    async def scenario() -> dict[str | None, int | str]:
        return {
            role: await outcome(server, fabric_path(), users[role][0] if role else None, BAD_FABRIC)
            for role in want
        }

    assert asyncio.run(scenario()) == want


def test_phase_socket_for_every_role_own_and_strangers_run(stack) -> None:  # type: ignore[no-untyped-def]
    server, users = stack
    stranger_run = users["stranger_run"]
    want: dict[tuple[str | None, bool], int | str] = {(None, False): 4401}
    for role in ROLES:
        want[(role, True)] = "open"
        want[(role, False)] = "open" if role in ("operators", "admins", "superuser") else 4404

    async def scenario() -> dict[tuple[str | None, bool], int | str]:
        got = {}
        for role, own in want:
            cookie, run_id = users[role] if role else (None, stranger_run)
            got[(role, own)] = await outcome(server, phase_path(run_id if own else stranger_run), cookie, BAD_PHASE)
        return got

    assert asyncio.run(scenario()) == want


def test_the_heatmap_sends_a_runs_markers_only_to_who_may_see_the_run(stack) -> None:  # type: ignore[no-untyped-def]
    server, users = stack
    stranger_run = users["stranger_run"]

    async def first_reply(role: str, run_id: int) -> dict[str, Any]:
        ws = await WebSocket.connect(f"{server.url.replace('http', 'ws')}{fabric_path()}",
                                     cookie=users[role][0], origin=server.url)
        try:
            await ws.send({"type": "markers", "run": run_id})
            while True:
                msg = await ws.receive(timeout=60, skip_binary=True)
                if msg["type"] in ("markers", "error"):
                    return msg
        finally:
            await ws.close()

    async def scenario() -> list[dict[str, Any]]:
        return [
            await first_reply("viewers", stranger_run),
            await first_reply("viewers", users["viewers"][1]),
            await first_reply("operators", stranger_run),
        ]

    refused, own, operator = asyncio.run(scenario())
    assert refused == {"type": "error", "message": f"no run {stranger_run}"}
    assert own["type"] == "markers" and own["run"] == users["viewers"][1]
    assert operator["type"] == "markers" and operator["run"] == stranger_run
