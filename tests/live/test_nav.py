"""The top bar and the landing page per role, with Django's test client (the real URLconf,
middleware, templates): what each role is shown, where each lands at ``/`` and right after the
login form, ``/phases/``, the run page's matrix opening on the first MoE layer's dispatch, and the
favicon and nav on every page, the error pages included."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from fabricmon.jobs.models import Run
from fabricmon.jobs.views import matrix_menu
from fabricmon.topology.services import import_fabric
from tests.topologies import two_leaf_two_spine

pytestmark = [pytest.mark.django_db]

FABRIC = "nav-fabric"
PASSWORD = "pw-not-secret-1"


def user(name: str, group: str | None = None, *, superuser: bool = False) -> User:
    u = User.objects.create_user(name, password=PASSWORD, is_staff=superuser, is_superuser=superuser)
    if group:
        u.groups.add(Group.objects.get(name=group))  # the groups the migrations made
    return u


def client_of(u: User) -> Client:
    c = Client()
    c.force_login(u)
    return c


def nav_links(html: str) -> dict[str, str]:
    """data-nav name → href of the top bar's links."""
    bar = html.split('<header class="topbar">', 1)[1].split("</header>", 1)[0]
    return dict(re.findall(r'data-nav="([a-z]+)" href="([^"]+)"', bar))


@pytest.fixture
def fabric() -> str:
    import_fabric(two_leaf_two_spine(FABRIC, servers=2))
    return FABRIC


def test_a_job_owner_lands_on_their_runs_at_the_root_and_after_logging_in(fabric) -> None:
    owner = user("owner")
    resp = client_of(owner).get("/")
    assert resp.status_code == 302 and resp.url == "/jobs/"
    # through the login form itself: LOGIN_REDIRECT_URL is "/", which sends a job owner on
    c = Client()
    resp = c.post("/accounts/login/", {"username": "owner", "password": PASSWORD}, follow=True)
    assert resp.redirect_chain[-1][0] == "/jobs/" and resp.status_code == 200
    assert b"Training runs" in resp.content
    resp = c.post("/accounts/logout/")
    resp = c.post("/accounts/login/", {"username": "owner", "password": PASSWORD, "next": "/"}, follow=True)
    assert resp.redirect_chain[-1][0] == "/jobs/"


def test_a_viewer_lands_on_the_fabric(fabric) -> None:
    viewer = user("viewer", "viewers")
    resp = Client().post("/accounts/login/", {"username": "viewer", "password": PASSWORD}, follow=True)
    assert [u for u, _ in resp.redirect_chain] == ["/", f"/fabric/{fabric}/"]
    assert client_of(viewer).get("/").url == f"/fabric/{fabric}/"


def test_the_bar_shows_each_role_what_it_may_open(fabric) -> None:
    owner, viewer, operator = user("owner"), user("viewer", "viewers"), user("operator", "operators")
    root = user("root", superuser=True)
    links = nav_links(client_of(owner).get("/jobs/").content.decode())
    assert links == {"runs": "/jobs/", "alerts": "/alerts/receivers/"}  # no fabric, no alert list, no admin
    links = nav_links(client_of(viewer).get("/jobs/").content.decode())
    assert links == {"fabric": f"/fabric/{fabric}/", "switches": f"/fabric/{fabric}/switches/",
                     "runs": "/jobs/", "alerts": "/alerts/"}
    assert set(nav_links(client_of(operator).get("/jobs/").content.decode())) == {"fabric", "switches", "runs", "alerts"}
    assert nav_links(client_of(root).get("/jobs/").content.decode())["admin"] == "/admin/"
    # every link of every role's bar opens for that role (no link to a 403)
    for u in (owner, viewer, operator, root):
        c = client_of(u)
        for href in nav_links(c.get("/jobs/").content.decode()).values():
            assert c.get(href, follow=True).status_code == 200, (u.username, href)


def test_the_current_runs_phase_view_is_in_the_bar(fabric) -> None:
    owner, operator = user("owner"), user("operator", "operators")
    assert "phases" not in nav_links(client_of(owner).get("/jobs/").content.decode())
    old = Run.objects.create(owner=owner, name="old", fabric=fabric, state=Run.State.FINISHED)
    mine = Run.objects.create(owner=owner, name="mine", fabric=fabric)
    links = nav_links(client_of(owner).get("/jobs/").content.decode())
    assert links["phases"] == f"/phases/runs/{mine.pk}/"  # the latest running one, not the ended one
    # on a run's own pages the bar links that run's phase view
    page = client_of(owner).get(f"/jobs/runs/{old.pk}/").content.decode()
    assert nav_links(page)["phases"] == f"/phases/runs/{old.pk}/"
    # an operator with no run of their own: the latest running run on the fabric
    assert nav_links(client_of(operator).get("/jobs/").content.decode())["phases"] == f"/phases/runs/{mine.pk}/"
    # a stranger's run is never named in the bar (their 404 page is the same as a missing run's)
    stranger = user("stranger")
    resp = client_of(stranger).get(f"/jobs/runs/{old.pk}/")
    assert resp.status_code == 404 and "old" not in nav_links(resp.content.decode()).get("phases", "")
    assert "Phases · old" not in resp.content.decode()


def test_phases_index_is_the_runs_list_with_every_runs_phase_view(fabric) -> None:
    owner = user("owner")
    run = Run.objects.create(owner=owner, name="mine", fabric=fabric)
    c = client_of(owner)
    resp = c.get("/phases/")
    assert resp.status_code == 302 and resp.url == "/jobs/"
    page = c.get("/jobs/").content.decode()
    assert f'href="/phases/runs/{run.pk}/">phase view</a>' in page and f"/whatif/runs/{run.pk}/" in page
    assert Client().get("/phases/").url.startswith("/accounts/login/")
    run_page = c.get(f"/jobs/runs/{run.pk}/").content.decode()
    assert f'id="phases-link" href="/phases/runs/{run.pk}/"' in run_page
    assert f'id="whatif-link" href="/whatif/runs/{run.pk}/"' in run_page


def test_every_page_has_the_favicon_and_one_look(fabric) -> None:
    owner, operator, root = user("owner"), user("operator", "operators"), user("root", superuser=True)
    run = Run.objects.create(owner=owner, name="mine", fabric=fabric)
    pages = {
        None: ["/accounts/login/", "/nope/"],
        owner: ["/jobs/", f"/jobs/runs/{run.pk}/", f"/phases/runs/{run.pk}/", f"/whatif/runs/{run.pk}/",
                "/alerts/receivers/", f"/fabric/{fabric}/", "/nope/"],
        operator: ["/alerts/", "/alerts/rules/", "/alerts/receivers/", f"/fabric/{fabric}/",
                   f"/fabric/{fabric}/switches/", f"/fabric/{fabric}/port/0/", f"/jobs/runs/{run.pk}/"],
        root: ["/admin/", "/admin/jobs/run/", "/admin/jobs/apitoken/"],
    }
    for u, paths in pages.items():
        c = client_of(u) if u else Client()
        for path in paths:
            resp = c.get(path)
            html = resp.content.decode()
            assert resp.status_code in (200, 403, 404), (path, resp.status_code)
            assert '<link rel="icon" type="image/svg+xml" href="/static/base/favicon.svg">' in html, path
            if not path.startswith("/admin/"):
                assert "/static/base/site.css" in html and '<header class="topbar">' in html, path
    assert client_of(owner).get(f"/fabric/{fabric}/").status_code == 403  # (the fabric is not a job owner's)
    page = client_of(owner).get(f"/fabric/{fabric}/").content.decode()
    assert 'href="/jobs/">Runs</a>' in page  # the 403 says where a job owner's things are


def test_the_run_page_opens_on_the_first_moe_layers_dispatch() -> None:
    keys = [("probe", -1, "other"), ("probe", 1, "dispatch"), ("probe", 0, "combine"), ("probe", 0, "dispatch"),
            ("probe", 0, "dispatch_bwd"), ("kineto", 0, "dispatch"), ("probe", 10, "combine"), ("probe", 2, "combine")]
    menu = matrix_menu(keys)
    assert [(m["source"], m["layer"], m["phase"]) for m in menu] == [
        ("probe", 0, "dispatch"), ("probe", 0, "combine"), ("probe", 0, "dispatch_bwd"), ("probe", 1, "dispatch"),
        ("probe", 2, "combine"), ("probe", 10, "combine"), ("probe", -1, "other"), ("kineto", 0, "dispatch"),
    ]
    assert [m["selected"] for m in menu].index(True) == 0 and sum(m["selected"] for m in menu) == 1
    # no dispatch matrix: the first layer's first phase; only unlayered ones: the first of those
    assert next(m for m in matrix_menu([("twin", 3, "combine"), ("twin", -1, "other")]) if m["selected"])["layer"] == 3
    assert matrix_menu([("api", -1, "other")])[0]["selected"] and matrix_menu([]) == []
