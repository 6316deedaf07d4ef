"""Rank maps that help, through the real ASGI server (Daphne, its own SQLite file, real Redis):
entries placed on the run's fabric with their NIC's leaf port, errors that name the missing ranks,
the unknown hosts and NICs, the rank-map helper (hosts → ranks) in the API and on the run page, a
run's fabric set or corrected after creation, and an unknown fabric a 422 naming it — never a 500.
"""

from __future__ import annotations

import ast
import html
import http.cookiejar
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from asgi_server import LiveServer, live_server

from collectors.probe import IngestClient

pytestmark = pytest.mark.integration
FABRIC = "rm-fab"  # 2 servers x 2 GPUs: node001/node002, mlx5_0 → leaf-r0, mlx5_1 → leaf-r1

SETUP = """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from fabricmon.jobs.tokens import issue_token
users = get_user_model()
owner = users.objects.create_user("rm-owner", password="pw-owner")
operator = users.objects.create_user("rm-operator", password="pw-op")
operator.groups.add(Group.objects.get(name="operators"))
stranger = users.objects.create_user("rm-stranger")
print(repr({u.username: issue_token(u, "t")[1] for u in (owner, operator, stranger)}))
"""


@pytest.fixture(scope="module")
def stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("rank-maps")
    srv = live_server(tmp, redis_url)
    srv.manage("generate_topology", "--name", FABRIC, "--servers", "2", "--gpus-per-server", "2",
               "--spines", "1", "-o", str(tmp / "fab.yaml"))  # fmt: skip
    srv.manage("load_topology", str(tmp / "fab.yaml"))
    tokens = ast.literal_eval(srv.manage("shell", "-c", SETUP).strip().splitlines()[-1])
    yield srv, {name.removeprefix("rm-"): IngestClient(srv.url, tok) for name, tok in tokens.items()}
    srv.forget_fabric(FABRIC)
    srv.stop()


def _post(client: IngestClient, path: str, body: Any) -> tuple[int, Any]:
    return client.request("POST", path, json.dumps(body).encode())


def test_an_unknown_fabric_is_a_400_naming_it_at_creation_and_when_set(stack) -> None:  # type: ignore[no-untyped-def]
    _, clients = stack
    owner = clients["owner"]
    status, body = _post(owner, "/jobs/api/runs", {"name": "typo", "fabric": "rm-fbr"})
    assert status == 422 and body["field"] == "fabric", body  # well-formed: the topology refuses it
    assert "unknown fabric 'rm-fbr'" in body["error"] and FABRIC in body["error"]
    run_id = owner.create_run("later", world_size=4)
    for name, expected in (("rm-fbr", 422), ("", 400), (5, 400), ("x" * 101, 400)):
        status, body = _post(owner, f"/jobs/api/runs/{run_id}/fabric", {"fabric": name})
        assert status == expected and body["field"] == "fabric", (name, body)
    status, body = _post(owner, f"/jobs/api/runs/{run_id}/fabric", {"fabric": FABRIC})
    assert status == 200 and body["fabric"] == FABRIC, body
    # an operator sees the run but does not change it; a stranger does not see it
    assert _post(clients["operator"], f"/jobs/api/runs/{run_id}/fabric", {"fabric": FABRIC})[0] == 403
    assert _post(clients["stranger"], f"/jobs/api/runs/{run_id}/fabric", {"fabric": FABRIC})[0] == 404


def test_entries_are_placed_and_the_errors_name_missing_ranks_hosts_and_nics(stack) -> None:  # type: ignore[no-untyped-def]
    _, clients = stack
    owner = clients["owner"]
    run_id = owner.create_run("placed", fabric=FABRIC, world_size=4)
    entries = [
        {"rank": 0, "host": "node001.cluster.local", "local_rank": 0},  # what a probe sends
        {"rank": 1, "host": "node001", "nic": "mlx5_1"},
        {"rank": 2, "host": "node002", "local_rank": 0, "nic": "mlx5_7"},  # a NIC node002 lacks
        {"rank": 3, "host": "gpu-box", "local_rank": 1},  # a host the fabric lacks
    ]
    status, body = owner.post_rank_map(run_id, entries)
    assert status == 422 and body["stored"] == 2, body
    rejected = {e["line"]: e for e in body["rejected"]}
    assert rejected[3]["field"] == "nic" and "'mlx5_7' is not a NIC of node002" in rejected[3]["reason"]
    assert rejected[4]["field"] == "host" and "'gpu-box' is not in fabric" in rejected[4]["reason"]
    check = body["check"]
    assert (check["placed"], check["world_size"], check["missing_ranks"]) == (2, 4, [2, 3]), check
    assert "missing from the map: ranks 2–3" in check["summary"]
    status, got = owner.request("GET", f"/jobs/api/runs/{run_id}/ranks")
    assert status == 200
    assert [(r["host"], r["nic"], r["switch"], r["switch_port"]) for r in got["ranks"]] == [
        ("node001", "mlx5_0", "leaf-r0", "Ethernet1"), ("node001", "mlx5_1", "leaf-r1", "Ethernet1"),
    ]
    status, detail = owner.request("GET", f"/jobs/api/runs/{run_id}")
    assert detail["rank_map"]["coverage"] == 0.5


def test_the_helper_builds_the_map_from_hosts_and_names_unknown_ones(stack) -> None:  # type: ignore[no-untyped-def]
    _, clients = stack
    owner = clients["owner"]
    run_id = owner.create_run("helper", fabric=FABRIC, world_size=4)
    path = f"/jobs/api/runs/{run_id}/ranks/build"
    status, body = _post(owner, path, {"hosts": ["node002", "node001"], "store": False})
    assert status == 200 and body["stored"] == 0 and len(body["ranks"]) == 4, body
    assert owner.request("GET", f"/jobs/api/runs/{run_id}/ranks")[1]["ranks"] == []
    status, body = _post(owner, path, {"hosts": "node002, node001", "gpus_per_host": 2})
    assert status == 200 and body["stored"] == 4, body
    assert [(e["rank"], e["host"], e["switch"], e["switch_port"]) for e in body["ranks"]] == [
        (0, "node002", "leaf-r0", "Ethernet2"), (1, "node002", "leaf-r1", "Ethernet2"),
        (2, "node001", "leaf-r0", "Ethernet1"), (3, "node001", "leaf-r1", "Ethernet1"),
    ]
    assert body["check"]["coverage"] == 1.0 and body["check"]["missing_ranks"] == []
    status, body = _post(owner, path, {"hosts": ["node001", "node009"]})
    assert status == 422 and body["rejected"][0]["line"] == 2 and "'node009'" in body["rejected"][0]["reason"]
    for bad in ({"hosts": []}, {"hosts": [1]}, {"hosts": ["node001"], "gpus_per_host": 0}, ["node001"],
                {"hosts": ["node001"], "store": "yes"}):
        status, body = _post(owner, path, bad)
        assert status == 400 and body["field"], (bad, body)
    bare = owner.create_run("no fabric yet", world_size=2)
    status, body = _post(owner, f"/jobs/api/runs/{bare}/ranks/build", {"hosts": ["node001"]})
    assert status == 422 and body["field"] == "fabric" and "names no fabric" in body["error"]


def test_a_map_sent_before_the_fabric_is_placed_when_it_is_set(stack) -> None:  # type: ignore[no-untyped-def]
    _, clients = stack
    owner = clients["owner"]
    run_id = owner.create_run("fabric later", world_size=2)
    status, body = owner.post_rank_map(run_id, [{"rank": r, "host": "node002", "local_rank": r} for r in (0, 1)])
    assert status == 200 and not body["check"]["checked"] and "names no fabric" in body["check"]["summary"]
    status, body = _post(owner, f"/jobs/api/runs/{run_id}/fabric", {"fabric": FABRIC})
    assert status == 200 and body["rank_map"]["placed"] == 2, body
    ranks = owner.request("GET", f"/jobs/api/runs/{run_id}/ranks")[1]["ranks"]
    assert [(r["nic"], r["switch"], r["switch_port"]) for r in ranks] == [
        ("mlx5_0", "leaf-r0", "Ethernet2"), ("mlx5_1", "leaf-r1", "Ethernet2"),
    ]


def test_a_run_whose_fabric_is_gone_is_a_4xx_on_its_views_until_it_is_corrected(stack, tmp_path) -> None:  # type: ignore[no-untyped-def]
    srv, clients = stack
    owner = clients["owner"]
    srv.manage("generate_topology", "--name", "rm-gone", "--servers", "1", "--gpus-per-server", "2",
               "--spines", "1", "-o", str(tmp_path / "gone.yaml"))  # fmt: skip
    srv.manage("load_topology", str(tmp_path / "gone.yaml"))
    run_id = owner.create_run("orphan", fabric="rm-gone", world_size=2)
    srv.forget_fabric("rm-gone")
    page = _Session(srv, "rm-owner", "pw-owner")
    status, body = page.get(f"/phases/runs/{run_id}/views.json")
    assert status == 422 and "'rm-gone' is not in the topology" in json.loads(body)["error"], body
    status, text = page.get(f"/jobs/runs/{run_id}/")
    assert status == 200 and "not in the topology: correct it below" in text
    # the run page's fabric form corrects it (owner; CSRF enforced by the real server)
    status, text = page.post_form(f"/jobs/runs/{run_id}/", f"/jobs/runs/{run_id}/fabric", {"fabric": FABRIC})
    assert status == 200 and f"fabric set to {FABRIC}" in text, text[-2000:]
    status, body = page.get(f"/phases/runs/{run_id}/views.json")
    assert status == 200, body[:500]


def test_the_run_page_builds_the_rank_map_and_shows_what_is_missing(stack) -> None:  # type: ignore[no-untyped-def]
    srv, clients = stack
    run_id = clients["owner"].create_run("page helper", fabric=FABRIC, world_size=6)
    page = _Session(srv, "rm-owner", "pw-owner")
    status, text = page.post_form(
        f"/jobs/runs/{run_id}/", f"/jobs/runs/{run_id}/ranks/build", {"hosts": "node001\nnode002\nnode404",
                                                                      "gpus_per_host": "2"})
    assert status == 200
    assert "'node404' is not in fabric" in text and "4 ranks stored from the topology" in text, text[-3000:]
    check = re.search(r'<p id="rank-check"[^>]*>([^<]*)</p>', text)
    assert check and "4 of 6 ranks placed" in check.group(1) and "ranks 4–5" in check.group(1), check
    assert text.count("leaf-r1</td><td>Ethernet2") == 1  # node002's second GPU: rank 3
    # an operator sees the page without the forms that change the run
    status, text = _Session(srv, "rm-operator", "pw-op").get(f"/jobs/runs/{run_id}/")
    assert status == 200 and 'id="rank-check"' in text and 'id="rank-build"' not in text


class _Session:
    """A logged-in browser without a browser: the real login form, cookies, CSRF tokens."""

    def __init__(self, srv: LiveServer, username: str, password: str) -> None:
        self.srv = srv
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        _, form = self.get("/accounts/login/")
        self._post("/accounts/login/", "/accounts/login/", {"username": username, "password": password,
                                                            "csrfmiddlewaretoken": _csrf(form)})

    def get(self, path: str) -> tuple[int, str]:
        try:
            with self.opener.open(self.srv.url + path, timeout=120) as resp:
                return resp.status, html.unescape(resp.read().decode())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def post_form(self, page: str, action: str, data: dict[str, str]) -> tuple[int, str]:
        _, html = self.get(page)
        return self._post(page, action, {**data, "csrfmiddlewaretoken": _csrf(html)})

    def _post(self, page: str, action: str, data: dict[str, str]) -> tuple[int, str]:
        req = urllib.request.Request(self.srv.url + action, data=urllib.parse.urlencode(data).encode(),
                                     headers={"Referer": self.srv.url + page})
        try:
            with self.opener.open(req, timeout=120) as resp:  # redirects followed back to the page
                return resp.status, html.unescape(resp.read().decode())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


def _csrf(page: str) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert found, "no CSRF token on the page"
    return found.group(1)


def test_the_export_round_trips_exactly(stack) -> None:  # type: ignore[no-untyped-def]
    """Exported lines carry host times and their clock offset: posting an export to a new run
    stores the same server times (the offset was applied twice), and its export is identical."""
    _, clients = stack
    owner = clients["owner"]
    t0 = 1_795_987_668_000_000_000
    lines = [
        {"id": f"x{i}", "rank": i % 2, "step": 0, "layer": 0, "phase": "dispatch", "start_ns": t0 + i * 1000,
         "end_ns": t0 + i * 1000 + 500, "source": "probe", "send_bytes_per_peer": {"0": 8, "1": 16},
         "recv_bytes_per_peer": {"0": 4, "1": 4}, **({"clock_offset_ns": -7_000} if i == 3 else {})}
        for i in range(6)
    ]
    first = owner.create_run("export a", world_size=2)
    status, _ = owner.post_events(first, b"\n".join(json.dumps(e).encode() for e in lines), clock_offset_ns=2_500_000)
    assert status == 200
    export_a = _export(owner, first)
    assert export_a[0]["event_id"] == "x3"  # ordered by server time: line 3's offset puts it first
    assert {e["event_id"]: (e["start_ns"], e["clock_offset_ns"]) for e in export_a} == {
        e["id"]: (e["start_ns"], e.get("clock_offset_ns", 2_500_000)) for e in lines
    }
    second = owner.create_run("export b", world_size=2)
    resent = b"".join(json.dumps({**e, "id": e["event_id"]}).encode() + b"\n" for e in export_a)
    status, body = owner.post_events(second, resent, clock_offset_ns=999)  # the lines' own offsets win
    assert status == 200 and body["stored"] == 6, body
    assert _export(owner, second) == export_a
    views = [owner.request("GET", f"/jobs/api/runs/{r}/matrix?phase=dispatch")[1]["sent"] for r in (first, second)]
    assert views[0] == views[1]


def _export(client: IngestClient, run_id: int) -> list[dict[str, Any]]:
    req = urllib.request.Request(f"{client.base_url}/jobs/api/runs/{run_id}/events",
                                 headers={"Authorization": f"Bearer {client.token}"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return [json.loads(line) for line in resp.read().splitlines() if line.strip()]


def test_create_api_token_says_a_new_user_needs_create_user(stack) -> None:  # type: ignore[no-untyped-def]
    srv, _ = stack
    with pytest.raises(AssertionError) as err:
        srv.manage("create_api_token", "rm-newcomer")
    assert "a new user needs --create-user" in str(err.value)
    assert srv.manage("create_api_token", "rm-newcomer", "--create-user").strip().startswith("fmj_")

