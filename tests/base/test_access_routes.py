"""Every URL pattern × every role × owner / non-owner, with the answer ``base.access`` promises.

The routes are walked from the resolver (``fabricmon/urls.py`` and everything it includes), so a
new route without an entry in ``ROUTES`` fails ``test_every_route_has_an_access_entry``. Each entry
names its rule (who may) and the requests that probe it (GET, and POST where the view writes).

    answer     what the user gets
    ok         the view ran (2xx, 3xx not to a login form, or its own 400/405/422 about the input)
    login      302 to the login form (pages, session JSON)
    unauth     401 (the token API without a token)
    forbidden  403 with the reason in the body
    hidden     404, as for a run that does not exist (a run the user may not see)

Roles: anonymous, no role (a logged-in job owner), viewer, operator, admin (the ``admins`` group,
not Django staff), superuser. Run routes are asked twice: for the user's own run and for a
stranger's. Twice: through Django's test client (the real URLconf, middleware and views; the
Django admin's routes too), and through the real ASGI server (``python -m fabricmon.serve``, its
body guard, real sessions, CSRF enforced). The sockets are asked in ``test_access_sockets.py``.
"""

from __future__ import annotations

import ast
import io
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from asgi_server import live_server
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from fabricmon.alerts.models import Alert, Episode, Receiver
from fabricmon.base.access import Role
from fabricmon.jobs.models import ApiToken, Run, TraceUpload
from fabricmon.jobs.tokens import issue_token
from fabricmon.topology.services import import_fabric
from tests.topologies import two_leaf_two_spine

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

FABRIC = "acc-fabric"
ROLES: dict[str, Role | None] = {
    "anonymous": None, "norole": Role.NONE, "viewer": Role.VIEWER, "operator": Role.OPERATOR,
    "admin": Role.ADMIN, "superuser": Role.SUPERUSER,
}
GROUP = {Role.VIEWER: "viewers", Role.OPERATOR: "operators", Role.ADMIN: "admins"}


# -- the rules: (role, own) → expected answer; role None is anonymous, own None a route without owner


def public(role: Role | None, own: bool | None) -> str:
    return "ok"


def logged_in(role: Role | None, own: bool | None) -> str:
    return "login" if role is None else "ok"


def needs(level: Role) -> Callable[[Role | None, bool | None], str]:
    def rule(role: Role | None, own: bool | None) -> str:
        if role is None:
            return "login"
        return "ok" if role >= level else "forbidden"

    rule.__name__ = f"needs_{level.name.lower()}"
    return rule


def run_seen(role: Role | None, own: bool | None, anon: str = "login") -> str:
    """Owner or operator+; anyone else: as if the run did not exist."""
    if role is None:
        return anon
    return "ok" if own or role >= Role.OPERATOR else "hidden"


def run_changed(role: Role | None, own: bool | None, anon: str = "login") -> str:
    """Owner or admin+; an operator sees the run (403 with the reason); anyone else: 404."""
    if role is None:
        return anon
    if own or role >= Role.ADMIN:
        return "ok"
    return "forbidden" if role >= Role.OPERATOR else "hidden"


def fabric_run(role: Role | None, own: bool | None) -> str:
    """A run's markers on the fabric heatmap: the fabric's rule (viewer+), then the run's."""
    return "forbidden" if role == Role.NONE else run_seen(role, own)


def api_seen(role: Role | None, own: bool | None) -> str:
    return run_seen(role, own, anon="unauth")


def api_changed(role: Role | None, own: bool | None) -> str:
    return run_changed(role, own, anon="unauth")


def api_token(role: Role | None, own: bool | None) -> str:
    return "unauth" if role is None else "ok"


def own_receiver(role: Role | None, own: bool | None) -> str:
    """A receiver is tested by its owner or an admin (the stranger's one here is fabric-wide)."""
    if role is None:
        return "login"
    return "ok" if own or role >= Role.ADMIN else "forbidden"


def django_admin(role: Role | None, own: bool | None) -> str:
    """Django's own rule: is_staff (our superuser); the admins group alone is not staff."""
    return "admin-ok" if role == Role.SUPERUSER else "admin-login"


# -- the table ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    method: str = "get"
    rule: Callable[[Role | None, bool | None], str] = logged_in
    data: Callable[[Ctx], Any] | None = None
    json: bool = False  # send data as a JSON body (the API), else as a form


@dataclass(frozen=True)
class Entry:
    probes: tuple[Probe, ...]
    kwargs: Callable[[Ctx], dict[str, Any]] = lambda ctx: {}
    owned: bool = False  # asked for the user's own object and a stranger's
    query: Callable[[Ctx], dict[str, Any]] | None = None  # a route whose objects are in its query string


@dataclass
class Ctx:
    """One user's view of the fixture: their own objects, or the stranger's."""

    run: Run
    upload: TraceUpload
    token_id: int
    receiver: Receiver
    alert: Alert
    episode: Episode


def run_kw(ctx: Ctx) -> dict[str, Any]:
    return {"run_id": ctx.run.pk}


def upload_kw(ctx: Ctx) -> dict[str, Any]:
    return {"run_id": ctx.run.pk, "upload_id": ctx.upload.pk}


def rank_map_file(ctx: Ctx) -> dict[str, Any]:
    f = io.BytesIO(json.dumps([{"rank": 0, "host": "node0"}]).encode())
    f.name = "ranks.json"
    return {"kind": "rankmap", "file": f}


FAB = {"fabric": FABRIC}
GET = Probe()
ROUTES: dict[str, Entry] = {
    # Django's auth views: public, except changing one's password
    "login": Entry((Probe(rule=public),)),
    "logout": Entry((Probe(rule=public),)),  # (a GET is a 405 for everyone: logging out is a POST)
    "password_change": Entry((GET,)),
    "password_change_done": Entry((GET,)),
    "password_reset": Entry((Probe(rule=public),)),
    "password_reset_done": Entry((Probe(rule=public),)),
    "password_reset_confirm": Entry((Probe(rule=public),), lambda ctx: {"uidb64": "MQ", "token": "x-y"}),
    "password_reset_complete": Entry((Probe(rule=public),)),
    # a job owner's pages: any logged-in user, for their own runs and tokens
    "jobs:runs": Entry((GET, Probe("post", data=lambda ctx: {"name": "from-the-table", "tags": "t"}))),
    "jobs:token-create": Entry((Probe("post", data=lambda ctx: {"name": "spare"}),)),
    # revoking someone else's token does nothing (the filter is by user): a redirect either way
    "jobs:token-revoke": Entry((Probe("post"),), lambda ctx: {"token_id": ctx.token_id}, owned=True),
    "jobs:run": Entry(
        (Probe(rule=run_seen), Probe("post", run_changed, lambda ctx: {"tags": "a, b"})), run_kw, owned=True
    ),
    "jobs:run-upload": Entry((Probe("post", run_changed, rank_map_file),), run_kw, owned=True),
    "jobs:run-fabric": Entry((Probe("post", run_changed, lambda ctx: FAB),), run_kw, owned=True),
    "jobs:run-ranks-build": Entry(
        (Probe("post", run_changed, lambda ctx: {"hosts": "node001", "gpus_per_host": "2"}),), run_kw, owned=True
    ),
    "jobs:run-upload-status": Entry((Probe(rule=run_seen),), upload_kw, owned=True),
    "jobs:run-timeline": Entry((Probe(rule=run_seen),), run_kw, owned=True),
    "jobs:run-matrix": Entry((Probe(rule=run_seen),), run_kw, owned=True),
    # the token API: no token 401, then the same run rules
    "jobs:openapi": Entry((Probe(rule=public),)),
    "jobs:clock": Entry((Probe(rule=public),)),
    "jobs:api-runs": Entry((Probe(rule=api_token), Probe("post", api_token, lambda ctx: {"name": "api"}, True))),
    "jobs:api-run": Entry((Probe(rule=api_seen),), run_kw, owned=True),
    "jobs:api-run-tags": Entry(
        (Probe(rule=api_seen), Probe("post", api_changed, lambda ctx: {"tags": ["x"]}, True)), run_kw, owned=True
    ),
    "jobs:api-run-end": Entry((Probe("post", api_changed, lambda ctx: {"state": "ended"}, True),), run_kw, owned=True),
    "jobs:api-run-fabric": Entry((Probe("post", api_changed, lambda ctx: FAB, True),), run_kw, owned=True),
    "jobs:api-run-ranks-build": Entry(
        (Probe("post", api_changed, lambda ctx: {"hosts": ["node001"]}, True),), run_kw, owned=True
    ),
    "jobs:api-run-ranks": Entry(
        (Probe(rule=api_seen), Probe("post", api_changed, lambda ctx: [{"rank": 0, "host": "n0"}], True)),
        run_kw, owned=True,
    ),
    "jobs:api-run-events": Entry(
        (Probe(rule=api_seen), Probe("post", api_changed, lambda ctx: {"rank": 0}, True)), run_kw, owned=True
    ),
    "jobs:api-run-uploads": Entry((Probe(rule=api_seen), Probe("post", api_changed)), run_kw, owned=True),
    "jobs:api-run-upload": Entry((Probe(rule=api_seen),), upload_kw, owned=True),
    "jobs:api-run-matrix": Entry((Probe(rule=api_seen),), run_kw, owned=True),
    # alerts: viewers read, operators silence and acknowledge, admins change rules
    "alerts:list": Entry((Probe(rule=needs(Role.VIEWER)),)),
    "alerts:ack": Entry((Probe("post", needs(Role.OPERATOR)),), lambda ctx: {"pk": ctx.alert.pk}),
    "alerts:silence": Entry(
        (Probe("post", needs(Role.OPERATOR), lambda ctx: {"fabric": FABRIC, "duration_s": 600}),)
    ),
    "alerts:episode": Entry((Probe(rule=needs(Role.VIEWER)),), lambda ctx: {"pk": ctx.episode.pk}),
    # receivers: any logged-in user keeps their own (an admin's are fabric-wide; see the unit test)
    "alerts:receivers": Entry((GET, Probe("post", data=lambda ctx: {"name": ""}))),
    "alerts:send_test": Entry((Probe("post", own_receiver),), lambda ctx: {"pk": ctx.receiver.pk}, owned=True),
    "alerts:rules": Entry(
        (Probe(rule=needs(Role.VIEWER)), Probe("post", needs(Role.ADMIN), lambda ctx: {"fabric": ""}))
    ),
    # a run's phase views: the run rule (they were open to any logged-in user)
    "phases-index": Entry((GET,)),  # /phases/: to the runs list, which links every run's phase view
    "phases:run": Entry((Probe(rule=run_seen),), run_kw, owned=True),
    "phases:run-api": Entry((Probe(rule=run_seen),), run_kw, owned=True),
    # a run's what-if figures and its fabric's scheduler exports: the run rule
    "whatif:run": Entry((Probe(rule=run_seen),), run_kw, owned=True),
    "whatif:run-api": Entry((Probe(rule=run_seen),), run_kw, owned=True),
    "whatif:export": Entry((Probe(rule=run_seen),), lambda ctx: run_kw(ctx) | {"kind": "topology.conf"}, owned=True),
    # a run's report (a download), its per-port bytes (CSV, Parquet) and two runs side by side: the
    # run rule (both runs of a comparison; without them, its form to choose: any logged-in user)
    "reports:run-report": Entry((Probe(rule=run_seen),), run_kw, owned=True),
    "reports:run-ports-csv": Entry((Probe(rule=run_seen),), run_kw, owned=True),
    "reports:run-ports-parquet": Entry((Probe(rule=run_seen),), run_kw, owned=True),
    "reports:compare": Entry(
        (Probe(rule=run_seen),), owned=True, query=lambda ctx: {"a": ctx.run.pk, "b": ctx.run.pk}
    ),
    # /metrics: a scraper's bearer token only (a session is not a scraper): 401 for every person
    "metrics": Entry((Probe(rule=lambda role, own: "unauth"),)),
    # the fabric: viewers and above; a run's markers on it follow the run rule
    # the landing page: the fabric for viewers and above, a job owner's runs (a redirect) for the rest
    "live:index": Entry((GET,)),
    "live:fabric": Entry((Probe(rule=needs(Role.VIEWER)),), lambda ctx: FAB),
    "live:layout": Entry((Probe(rule=needs(Role.VIEWER)),), lambda ctx: FAB),
    "live:port": Entry((Probe(rule=needs(Role.VIEWER)),), lambda ctx: FAB | {"position": 0}),
    "live:port_json": Entry((Probe(rule=needs(Role.VIEWER)),), lambda ctx: FAB | {"position": 0}),
    "live:switches": Entry((Probe(rule=needs(Role.VIEWER)),), lambda ctx: FAB),
    "live:health": Entry((Probe(rule=needs(Role.VIEWER)),), lambda ctx: FAB),
    "live:runs": Entry((Probe(rule=needs(Role.VIEWER)),), lambda ctx: FAB),
    "live:markers": Entry((Probe(rule=fabric_run),), lambda ctx: FAB | {"run_id": ctx.run.pk}, owned=True),
    "live:static": Entry((Probe(rule=public),), lambda ctx: {"path": "live/style.css"}),
}
# runs, tokens and uploads are made by their owners (a token's secret is shown once, to its user)
ADMIN_NO_ADD = {"admin:jobs_run_add", "admin:jobs_apitoken_add", "admin:jobs_traceupload_add"}
ADMIN_PREFIX = "admin/"  # every route of the Django admin: one rule (Django's own), all probed
# (object 0 exists nowhere: the superuser is answered "no such object", not sent a whole form)
ADMIN_KWARGS = {"object_id": "0", "id": "0", "content_type_id": "0", "app_label": "auth", "url": "nowhere/"}


def walk(patterns: list[Any], prefix: str = "", ns: str | None = None) -> list[tuple[str | None, str, Any]]:
    """(namespaced name, full route, pattern) of every leaf route."""
    out: list[tuple[str | None, str, Any]] = []
    for p in patterns:
        if isinstance(p, URLResolver):
            inner = ":".join(x for x in (ns, p.namespace) if x) or None
            out += walk(p.url_patterns, prefix + str(p.pattern), inner)
        elif isinstance(p, URLPattern):
            name = f"{ns}:{p.name}" if ns and p.name else p.name
            out.append((name, prefix + str(p.pattern), p.pattern))
    return out


LEAVES = walk(get_resolver().url_patterns)


def test_every_route_has_an_access_entry() -> None:
    """A route added without saying who may use it fails here (and an entry for a gone route)."""
    ours = {name for name, route, _ in LEAVES if not route.startswith(ADMIN_PREFIX)}
    unnamed = [route for name, route, _ in LEAVES if name is None and not route.startswith(ADMIN_PREFIX)]
    assert not unnamed, f"routes without a name cannot be given an access entry: {unnamed}"
    assert ours - set(ROUTES) == set(), "routes without an access entry in tests/base/test_access_routes.py"
    assert set(ROUTES) - ours == set(), "entries for routes that no longer exist"
    assert sum(route.startswith(ADMIN_PREFIX) for _, route, _ in LEAVES) > 50  # the admin is walked too


# -- the fixture: one user per role, each with their own run, upload, tokens and receiver ------------


@dataclass
class World:
    users: dict[str, User | None]
    tokens: dict[str, str]  # role → API token (clear text)
    own: dict[str, Ctx]
    stranger: Ctx
    clients: dict[str, Client] = field(default_factory=dict)


def _objects_of(user: User, fabric_wide_receiver: bool = False) -> Ctx:
    run = Run.objects.create(owner=user, name=f"run-of-{user.username}", fabric=FABRIC, world_size=4)
    upload = TraceUpload.objects.create(run=run, kind="kineto", filename="t.json")
    spare, _ = issue_token(user, "spare")
    receiver = Receiver.objects.create(
        name=f"rcv-{user.username}", kind="webhook", url="http://127.0.0.1:9/hook",
        owner=None if fabric_wide_receiver else user,
    )
    return Ctx(run, upload, spare.pk, receiver, Alert.objects.get(), Episode.objects.get())


@pytest.fixture
def world() -> World:
    import_fabric(two_leaf_two_spine(FABRIC, servers=4))
    now = datetime.now(UTC)
    episode = Episode.objects.create(fabric=FABRIC, opened_at=now)
    Alert.objects.create(
        fingerprint="acc-fp", fabric=FABRIC, kind="incast", key="leaf-r0:1", state=Alert.State.FIRING,
        active_since=now, last_true=now, fired_at=now, episode=episode,
    )
    users: dict[str, User | None] = {"anonymous": None}
    tokens: dict[str, str] = {}
    own: dict[str, Ctx] = {}
    for name, role in ROLES.items():
        if role is None:
            continue
        user = User.objects.create_user(f"acc-{name}")  # (no password: force_login, no hashing cost)
        if role == Role.SUPERUSER:
            user.is_superuser = user.is_staff = True
            user.save()
        elif role in GROUP:
            user.groups.add(Group.objects.get(name=GROUP[role]))  # the groups the migrations made
        users[name] = user
        tokens[name] = issue_token(user, "main")[1]
        own[name] = _objects_of(user)
    stranger = User.objects.create_user("acc-stranger")
    return World(users, tokens, own, _objects_of(stranger, fabric_wide_receiver=True))


# -- asking -------------------------------------------------------------------------------------------


def answer(resp: Any) -> str:
    if resp.status_code in (301, 302):
        where = resp.headers.get("Location", "")
        if where.startswith(settings.LOGIN_URL):
            return "login"
        return "admin-login" if where.startswith("/admin/login/") else "ok"
    return {401: "unauth", 403: "forbidden", 404: "hidden"}.get(resp.status_code, "ok")


def ask(client: Client, probe: Probe, url: str, ctx: Ctx, token: str | None, api: bool) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if api and token else {}
    data = probe.data(ctx) if probe.data else None
    if probe.method == "get":
        return client.get(url, headers=headers)
    if probe.json:
        return client.post(url, json.dumps(data), content_type="application/json", headers=headers)
    return client.post(url, data or {}, headers=headers)


def client_for(world: World, role_name: str) -> Client:
    if role_name not in world.clients:
        client = Client()
        user = world.users[role_name]
        if user is not None:
            client.force_login(user)
        world.clients[role_name] = client
    return world.clients[role_name]


def check(got: str, want: str, resp: Any, where: str) -> str | None:
    if want == "admin-ok":  # the superuser in the admin: anything but a login form or a refusal
        return None if got in ("ok", "hidden") and resp.status_code < 500 else f"{where}: {resp.status_code}"
    if got != want or resp.status_code >= 500:
        return f"{where}: wanted {want}, got {got} ({resp.status_code})"
    if got == "forbidden":
        body = resp.content.decode(errors="replace")
        if not any(word in body for word in ("only", "viewers", "owner")):
            return f"{where}: a 403 without its reason: {body[:200]!r}"
    return None


def cases(own_ctx: dict[str, Any], stranger_ctx: Any) -> Iterator[tuple[str, str, Role | None, bool | None, Any, Probe]]:
    """(route name, role name, role, own, context, probe) of every non-admin route × role × owner."""
    for name, route, _pattern in LEAVES:
        if route.startswith(ADMIN_PREFIX):
            continue
        entry = ROUTES[name]  # (every route has one: test_every_route_has_an_access_entry)
        for role_name, role in ROLES.items():
            for own in (True, False) if entry.owned and role is not None else (None,):
                ctx = own_ctx[role_name] if own else stranger_ctx
                url = reverse(name, kwargs=entry.kwargs(ctx))
                if entry.query is not None:
                    url += "?" + urllib.parse.urlencode(entry.query(ctx))
                for probe in entry.probes:
                    yield url, role_name, role, own, ctx, probe


def where(probe: Probe, url: str, role_name: str, own: bool | None) -> str:
    return f"{probe.method.upper()} {url} as {role_name}{'' if own is None else f' own={own}'}"


def test_every_route_for_every_role_and_owner(world: World) -> None:
    failures: list[str] = []
    asked = 0
    for url, role_name, role, own, ctx, probe in cases(world.own, world.stranger):
        api = url.startswith("/jobs/api/")
        resp = ask(client_for(world, role_name), probe, url, ctx, world.tokens.get(role_name), api)
        failures.append(check(answer(resp), probe.rule(role, own), resp, where(probe, url, role_name, own)) or "")
        asked += 1
    failures = [f for f in failures if f]
    assert not failures, "\n".join(failures)
    assert asked > 300


def test_every_admin_route_keeps_djangos_staff_rule(world: World) -> None:
    failures: list[str] = []
    for name, route, pattern in LEAVES:
        if not route.startswith(ADMIN_PREFIX):
            continue
        params = set(pattern.regex.groupindex)
        kwargs = {k: v for k, v in ADMIN_KWARGS.items() if k in params}
        url = reverse(name, kwargs=kwargs) if name else f"/{ADMIN_PREFIX}{ADMIN_KWARGS['url']}"
        for role_name, role in ROLES.items():
            resp = client_for(world, role_name).get(url)
            # the admin's login form and logout are for everyone (a staff user is sent on to the index)
            want = "ok" if name in ("admin:login", "admin:logout") else django_admin(role, None)
            got = answer(resp)
            if name == "admin:autocomplete" and want == "admin-ok" and got == "forbidden":
                got = "ok"  # its own input check: a 403 for a request without app_label & co, to anyone
            if name in ADMIN_NO_ADD and want == "admin-ok" and got == "forbidden":
                got = "ok"  # made elsewhere, never in the admin (jobs/admin.py): a 403 even for a superuser
            failures.append(check(got, want, resp, f"GET {url} as {role_name}") or "")
    failures = [f for f in failures if f]
    assert not failures, "\n".join(failures)


def test_a_receiver_is_fabric_wide_only_when_an_admin_makes_it(world: World) -> None:
    form = {"name": "hook", "kind": "webhook", "url": "https://chat.example/hook", "kinds": "[]"}
    for role_name, fabric_wide in (("norole", False), ("operator", False), ("admin", True)):
        client_for(world, role_name).post("/alerts/receivers/", form | {"name": f"hook-{role_name}"})
        rcv = Receiver.objects.get(name=f"hook-{role_name}")
        assert (rcv.owner is None) == fabric_wide, role_name
    page = client_for(world, "operator").get("/alerts/receivers/").content.decode()
    assert "hook-operator" in page and "hook-admin" not in page and "hook-norole" not in page


def test_a_viewer_lists_only_their_own_runs_beside_the_heatmap(world: World) -> None:
    names = {r["name"] for r in client_for(world, "viewer").get(f"/fabric/{FABRIC}/runs.json").json()["runs"]}
    assert names == {"run-of-acc-viewer"}
    names = {r["name"] for r in client_for(world, "operator").get(f"/fabric/{FABRIC}/runs.json").json()["runs"]}
    assert {"run-of-acc-viewer", "run-of-acc-stranger"} <= names


def test_the_runs_page_lists_what_the_user_may_see(world: World) -> None:
    for role_name, sees_strangers in (("norole", False), ("viewer", False), ("operator", True)):
        page = client_for(world, role_name).get("/jobs/").content.decode()
        assert f"run-of-acc-{role_name}" in page
        assert ("run-of-acc-stranger" in page) == sees_strangers, role_name


def test_tokens_stay_their_users(world: World) -> None:
    """Revoking a stranger's token through the page leaves it working."""
    stranger_spare = ApiToken.objects.get(pk=world.stranger.token_id)
    client_for(world, "admin").post(f"/jobs/tokens/{stranger_spare.pk}/revoke")
    stranger_spare.refresh_from_db()
    assert stranger_spare.revoked_at is None


# -- the same table through the real ASGI server --------------------------------------------------------
# ``python -m fabricmon.serve`` (Daphne with the body guard in front of Django, real sessions, CSRF
# enforced: the client sends the cookie and header a page's form would). The Django admin is left
# to the test-client pass above: its rule is Django's own code.

SERVER_WORLD = """
from types import SimpleNamespace as NS
from datetime import UTC, datetime
from django.contrib.auth.models import Group, User
from django.test import Client
from fabricmon.alerts.models import Alert, Episode, Receiver
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.jobs.models import Run, TraceUpload
from fabricmon.jobs.tokens import issue_token
from fabricmon.topology.services import import_fabric
import_fabric(rail_optimized(%(fabric)r, servers=2, gpus_per_server=2, spines=1))
now = datetime.now(UTC)
episode = Episode.objects.create(fabric=%(fabric)r, opened_at=now)
alert = Alert.objects.create(fingerprint="acc", fabric=%(fabric)r, kind="incast", key="k", state="firing",
                             active_since=now, last_true=now, fired_at=now, episode=episode)
def objects(user, fabric_wide=False):
    run = Run.objects.create(owner=user, name="run-of-" + user.username, fabric=%(fabric)r, world_size=4)
    rcv = Receiver.objects.create(name="r-" + user.username, kind="webhook", url="http://127.0.0.1:9/hook",
                                  owner=None if fabric_wide else user)
    return {"run": run.pk, "upload": TraceUpload.objects.create(run=run, kind="kineto").pk,
            "token_id": issue_token(user, "spare")[0].pk, "receiver": rcv.pk, "alert": alert.pk,
            "episode": episode.pk}
out = {"own": {}, "cookies": {}, "tokens": {}}
for name, group, su in %(roles)r:
    user = User.objects.create_user("acc-" + name, is_superuser=su, is_staff=su)
    if group:
        user.groups.add(Group.objects.get(name=group))
    client = Client(); client.force_login(user)
    out["cookies"][name] = client.cookies["sessionid"].value
    out["tokens"][name] = issue_token(user, "main")[1]
    out["own"][name] = objects(user)
out["stranger"] = objects(User.objects.create_user("acc-stranger"), fabric_wide=True)
print(repr(out))
"""
CSRF = "a" * 32  # a form's CSRF secret: the same value in the cookie and the header


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class Answer:
    status_code: int
    headers: Any
    content: bytes


def server_ctx(ids: dict[str, int]) -> Any:
    """The ids the server's world printed, shaped like ``Ctx`` for the table's lambdas."""
    return SimpleNamespace(
        run=SimpleNamespace(pk=ids["run"]), upload=SimpleNamespace(pk=ids["upload"]), token_id=ids["token_id"],
        receiver=SimpleNamespace(pk=ids["receiver"]), alert=SimpleNamespace(pk=ids["alert"]),
        episode=SimpleNamespace(pk=ids["episode"]),
    )


def ask_server(server: Any, probe: Probe, url: str, ctx: Any, cookie: str | None, token: str | None) -> Answer:
    headers = {"X-CSRFToken": CSRF, "Cookie": f"csrftoken={CSRF}" + (f"; sessionid={cookie}" if cookie else "")}
    if url.startswith("/jobs/api/") and token:
        headers["Authorization"] = f"Bearer {token}"
    body = None
    if probe.method == "post":
        data = probe.data(ctx) if probe.data else {}
        if probe.json:
            body, headers["Content-Type"] = json.dumps(data).encode(), "application/json"
        else:  # (a file in a form is left out: the access check comes before the view reads it)
            fields = {k: v for k, v in data.items() if isinstance(v, str | int | float)}
            body = urllib.parse.urlencode(fields).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
    req = urllib.request.Request(f"{server.url}{url}", data=body, headers=headers, method=probe.method.upper())
    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=60) as resp:
            return Answer(resp.status, resp.headers, resp.read())
    except urllib.error.HTTPError as err:
        return Answer(err.code, err.headers, err.read())


@pytest.fixture(scope="module")
def server_world(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    server = live_server(tmp_path_factory.mktemp("access-routes"), redis_url)
    roles = [(n, GROUP.get(r) if r is not None else None, r == Role.SUPERUSER)  # type: ignore[arg-type]
             for n, r in ROLES.items() if r is not None]
    out = server.manage("shell", "-c", SERVER_WORLD % {"fabric": FABRIC, "roles": roles})
    yield server, ast.literal_eval(out.strip().splitlines()[-1])
    server.stop()


def test_every_route_for_every_role_and_owner_through_the_real_server(server_world: Any) -> None:
    server, world = server_world
    own = {name: server_ctx(ids) for name, ids in world["own"].items()}
    failures: list[str] = []
    seen: dict[str, int] = {}
    for url, role_name, role, is_own, ctx, probe in cases(own, server_ctx(world["stranger"])):
        resp = ask_server(server, probe, url, ctx, world["cookies"].get(role_name), world["tokens"].get(role_name))
        got = answer(resp)
        seen[got] = seen.get(got, 0) + 1
        failures.append(check(got, probe.rule(role, is_own), resp, where(probe, url, role_name, is_own)) or "")
    failures = [f for f in failures if f]
    assert not failures, "\n".join(failures)
    assert set(seen) == {"ok", "login", "unauth", "forbidden", "hidden"}, seen
