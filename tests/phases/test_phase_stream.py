"""A run's phase views over the WebSocket, end to end without a browser: a real Daphne server
(own SQLite file, real Redis for the channel layer and the live window), the twin's MoE job
posted in parts through the probe's client path, and a real WebSocket client (tests/asgi_server.py).

What is checked: one snapshot, then deltas carrying only new or changed columns; the client's
merged copy equals the JSON API's full answer at the end; a withheld view carries no values, only
its reasons; a routing subscribe answers with a new snapshot; the events API's
nudge (``base.sockets.run_changed`` after a stored batch, over the Redis channel layer) wakes a socket
whose tick would not come for an hour. Message sizes are printed (``-s``) for the report.
"""

from __future__ import annotations

import ast
import asyncio
import json
from typing import Any

import numpy as np
import pytest
from asgi_server import LiveServer, WebSocket, WebSocketClosedError, get_json, live_server, session_cookie
from phase_events import post_through_probe

from collectors.probe import IngestClient
from fabricmon.telemetry import live_window
from twin.config import TwinConfig
from twin.job_reporter import TwinJobRecording

pytestmark = [pytest.mark.integration]
T0_NS = 1_800_000_000_000_000_000
USER, PASSWORD = "phase-op", "phase-op-password"
SETUP = """
from django.contrib.auth import get_user_model
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.jobs.runs import create_run
from fabricmon.jobs.tokens import issue_token
from fabricmon.topology.services import import_fabric
import_fabric(rail_optimized({fabric!r}, servers=4, gpus_per_server=4, spines=2, speed_gbps=400))
u = get_user_model().objects.get(username={user!r})
runs = [create_run(u, n, fabric={fabric!r}, world_size={world}).pk for n in {names!r}]
print(repr((runs, issue_token(u)[1])))
"""


WINDOW_STEPS = 64  # the recording has ~150 steps: the window slides as the job posts


@pytest.fixture(scope="module", params=[1.0, 3600.0], ids=["tick-1s", "tick-1h"])
def server(request, redis_url: str, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Daphne with the phase socket's tick at 1 s, or at an hour (only a nudge can wake it)."""
    srv = live_server(
        tmp_path_factory.mktemp("phase-stream"), redis_url, FABRICMON_PHASES_TICK_S=str(request.param),
        FABRICMON_PHASE_WINDOW_STEPS=str(WINDOW_STEPS),
    )
    srv.manage("create_demo_user", "--username", USER, "--password", PASSWORD, "--role", "operators")
    srv.tick_s = request.param  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def twin_runs(server: LiveServer, redis_client: Any, fabric: str, names: tuple[str, ...]):  # type: ignore[no-untyped-def]
    rec = TwinJobRecording(TwinConfig(name=fabric, servers=4, gpus_per_server=4, spines=2), 40.0, T0_NS)
    out = server.manage(
        "shell", "-c", SETUP.format(fabric=fabric, user=USER, world=rec.world_size, names=names)
    )
    runs, token = ast.literal_eval(out.strip().splitlines()[-1])
    for frame in rec.counter_frames(1.0):
        live_window.append(redis_client, frame, max_frames=10_000)
    return rec, runs, IngestClient(server.url, token)


def ws_url(server: LiveServer, run_id: int) -> str:
    return server.url.replace("http://", "ws://") + f"/ws/phases/runs/{run_id}/"


class Held:
    """The client's copy, merged the way frontend/static/phases/phaseview.js merges."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self.state, self.views = snapshot["state"], {k: dict(v) for k, v in snapshot["views"].items()}

    def apply(self, delta: dict[str, Any]) -> None:
        self.state = delta.get("state", self.state)
        for name, v in delta.get("views", {}).items():
            held = self.views.get(name)
            if v["mode"] == "full" or held is None or held["values"] is None:
                self.views[name] = dict(v)
                continue
            held.update(verdict=v["verdict"], gates=v["gates"], failed=v["failed"])
            if v.get("drop"):  # columns that left the server's step window
                gone = {tuple(c) for c in v["drop"]}
                keep = [i for i, c in enumerate(held["columns"]) if tuple(c) not in gone]
                for key in ("columns", "values", "hot_port", "hot_claim"):
                    if held.get(key) is not None:
                        held[key] = [held[key][i] for i in keep]
            at = {tuple(c): i for i, c in enumerate(held["columns"])}
            claims = v.get("hot_claim") or [None] * len(v["columns"])
            for c, row, hot, claim in zip(v["columns"], v["values"], v["hot_port"], claims, strict=True):
                if tuple(c) not in at:
                    at[tuple(c)] = len(held["columns"])
                    for key in ("columns", "values", "hot_port", "hot_claim"):
                        if held.get(key) is not None:
                            held[key].append(None)
                    held["columns"][-1] = c
                i = at[tuple(c)]
                held["values"][i], held["hot_port"][i] = row, hot
                if held.get("hot_claim") is not None:
                    held["hot_claim"][i] = claim

    def table(self, name: str) -> dict[tuple[Any, ...], list[int]]:
        v = self.views[name]
        return {tuple(c): row for c, row in zip(v["columns"], v["values"], strict=True)}


def newest_step(held: Held) -> int:
    return max(c[0] for c in held.views["projected"]["columns"])


async def whole(ws: WebSocket, first: dict[str, Any], held: Held) -> None:
    """Take the ``more`` parts of a split message into ``held``, then acknowledge the last."""
    msg = first
    while not msg["last"]:
        msg = await ws.receive(timeout=120)
        assert msg["type"] == "more", msg
        held.apply(msg)
    await ws.send({"type": "ack", "seq": msg["seq"]})


async def receive_snapshot(ws: WebSocket) -> tuple[dict[str, Any], Held]:
    snap = await ws.receive(timeout=120)
    assert snap["type"] == "snapshot", snap
    held = Held(snap)
    await whole(ws, snap, held)
    return snap, held


async def until(ws: WebSocket, held: Held, done, deltas: list[dict[str, Any]]) -> None:  # type: ignore[no-untyped-def]
    while not done(held):
        msg = await ws.receive(timeout=120)
        assert msg["type"] == "delta", msg
        held.apply(msg)
        deltas.append(msg)
        await whole(ws, msg, held)


def test_snapshot_then_deltas_of_only_new_columns_match_the_api(server, redis_client, fabric_name) -> None:
    rec, (run_id,), client = twin_runs(server, redis_client, fabric_name, ("stream",))
    status, body = client.post_rank_map(run_id, rec.rank_map())
    assert status < 300, body
    events = sorted(rec.events(), key=lambda e: e["start_ns"])
    cuts = [T0_NS + s * 1_000_000_000 for s in (24, 32)]  # 24 s, then 8 s, then the last 8 s
    parts = [
        [e for e in events if lo <= e["start_ns"] < hi]
        for lo, hi in zip([0, *cuts], [*cuts, 2**63], strict=True)
    ]
    post_through_probe(client, run_id, parts[0])
    cookie = session_cookie(server, USER, PASSWORD)
    snapshot_bytes: list[int] = []

    async def scenario() -> tuple[Held, list[dict[str, Any]], dict[str, Any], list[int]]:
        ws = await WebSocket.connect(ws_url(server, run_id), cookie=cookie, origin=server.url)
        snap, held = await receive_snapshot(ws)
        snapshot_bytes.append(sum(ws.received_bytes))
        assert snap["state"] == "running" and snap["error"] is None
        proj = held.views["projected"]
        assert proj["verdict"] == "show" and {g["verdict"] for g in proj["gates"]} == {"pass"}
        assert len(proj["values"][0]) == len(snap["meta"]["ports"]) == len(rec.ports)
        deltas: list[dict[str, Any]] = []
        first_newest = newest_step(held)
        part_bytes = []
        for part in parts[1:]:
            before = newest_step(held)
            # with the hour-long tick only the events API's own nudge (base.sockets.run_changed after the
            # batch commits) can wake the socket
            await asyncio.to_thread(post_through_probe, client, run_id, part)
            n = len(deltas)
            await until(ws, held, lambda h, b=before: newest_step(h) > b, deltas)
            new = [d["views"]["projected"] for d in deltas[n:] if "projected" in d.get("views", {})]
            # only what is new or grew travels, and what left the window is named, not resent
            assert all(v["mode"] == "upsert" for v in new)
            assert sum(len(v["columns"]) for v in new) < len(held.views["projected"]["columns"]) / 2
            assert any(v.get("drop") for v in new)
            assert len({c[0] for c in held.views["projected"]["columns"]}) <= WINDOW_STEPS
            sent = sum(len(json.dumps(d, separators=(",", ":"))) for d in deltas[n:])
            # per new column: how the updates split across messages depends on timing, the cost of a
            # column must not
            part_bytes.append(sent / max(1, sum(len(v["columns"]) for v in new)))
        api = await asyncio.to_thread(get_json, server, f"/phases/runs/{run_id}/views.json", cookie)
        want = {
            tuple(c): np.rint(row).tolist()
            for c, row in zip(
                api["views"]["projected"]["columns"], api["views"]["projected"]["values"], strict=True
            )
        }
        # the last batches may still be on their way to the socket: take deltas until it holds the API's
        await until(ws, held, lambda h: h.table("projected") == want, deltas)
        await ws.close()
        assert first_newest < newest_step(held)
        # a column of training costs the same bytes later in the run: updates do not grow with it
        assert part_bytes[1] < 1.5 * part_bytes[0], part_bytes
        return held, deltas, api, ws.received_bytes

    held, deltas, api, _ = asyncio.run(scenario())
    assert deltas, "no delta arrived"
    for source in ("projected", "attributed", "measured"):
        want = api["views"][source]
        got = held.views[source]
        assert got["verdict"] == want["verdict"] and got["failed"] == want["failed"], source
        table = held.table(source)
        assert set(table) == {tuple(c) for c in want["columns"]}, source
        ref = np.rint(np.array(want["values"]))
        mine = np.array([table[tuple(c)] for c in want["columns"]])
        assert np.array_equal(mine, ref), source
        assert [
            held.views[source]["hot_port"][held.views[source]["columns"].index(c)] for c in want["columns"]
        ] == np.argmax(mine, axis=1).tolist()
        if want.get("hot") is not None:  # attributed: the hot port only where the counters vouch
            at = [held.views[source]["columns"].index(c) for c in want["columns"]]
            assert [held.views[source]["hot_claim"][i]["port"] for i in at] == want["hot"]["port"]
            assert got["basis"] == want["basis"]
    per_delta = [
        (
            len(d["views"]["projected"]["columns"]) if "projected" in d.get("views", {}) else 0,
            len(json.dumps(d, separators=(",", ":"))),
        )
        for d in deltas
    ]
    print(
        f"\nphase socket ({server.tick_s} s tick), {len(rec.ports)} ports: snapshot {snapshot_bytes[0]} B; "
        f"deltas (projected columns, bytes) {per_delta}; all {len(api['views']['projected']['columns'])} columns "
        f"as JSON from views.json would be {len(json.dumps(api, separators=(',', ':')))} B"
    )


def test_a_withheld_view_carries_no_values_and_a_routing_subscribe_resnapshots(
    server, redis_client, fabric_name
) -> None:
    rec, (half, clean), client = twin_runs(server, redis_client, fabric_name, ("half", "clean"))
    for run_id, kw in ((half, {"coverage": 0.5}), (clean, {})):
        stats = rec.report(client, run_id, **kw)
        assert stats["posted"] > 0 and stats["rejected"] == 0 and stats["dropped"] == 0, stats
    cookie = session_cookie(server, USER, PASSWORD)

    async def scenario() -> None:
        ws = await WebSocket.connect(ws_url(server, half), cookie=cookie, origin=server.url)
        proj = (await receive_snapshot(ws))[1].views["projected"]
        assert proj["verdict"] == "withhold" and proj["values"] is None and proj["hot_port"] is None
        assert proj["failed"][0].startswith("rank_map_coverage: 50 % < 90 %"), proj["failed"]
        await ws.close()

        ws = await WebSocket.connect(ws_url(server, clean), cookie=cookie, origin=server.url)
        snap, held = await receive_snapshot(ws)
        assert held.views["projected"]["verdict"] == "show" and snap["routing"] == "pxn"
        await ws.send({"type": "subscribe", "routing": "ecmp", "seed": 0})
        again, held = await receive_snapshot(ws)
        assert again["routing"] == "ecmp(seed=0)"
        mismatch = held.views["projected"]
        assert mismatch["verdict"] == "withhold" and mismatch["values"] is None
        assert [r.split(":")[0] for r in mismatch["failed"]] == ["projected_vs_measured"]
        await ws.send({"type": "subscribe", "routing": "bogus"})
        err = await ws.receive(timeout=60)
        assert err["type"] == "error" and "bogus" in err["message"]
        await ws.close()

    asyncio.run(scenario())


def test_refused_without_login_or_for_an_unknown_run(server) -> None:
    async def scenario() -> None:
        for cookie, run_id, code in ((None, 1, 4401), (session_cookie(server, USER, PASSWORD), 10**9, 4404)):
            ws = await WebSocket.connect(ws_url(server, run_id), cookie=cookie, origin=server.url)
            with pytest.raises(WebSocketClosedError) as closed:
                await ws.receive(timeout=60)
            assert closed.value.code == code

    asyncio.run(scenario())
