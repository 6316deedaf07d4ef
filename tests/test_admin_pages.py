"""The Django admin as a superuser: every registered model's list and change page renders (with a
real object of each), runs and API tokens are there, labels read as English (no "Outboxs"), and a
token's digest is never on a page."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from fabricmon.alerts.models import (
    Alert,
    AlertTransition,
    AllowedHost,
    Episode,
    GroupMember,
    NotificationGroup,
    Outbox,
    Receiver,
    Rule,
    Silence,
)
from fabricmon.jobs.models import ApiToken, RankMapEntry, Run, TraceUpload
from fabricmon.jobs.tokens import issue_token
from fabricmon.topology.services import import_fabric
from tests.topologies import two_leaf_two_spine

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def root() -> Client:
    c = Client()
    c.force_login(User.objects.create_superuser("root", password="pw-not-secret-1"))
    return c


@pytest.fixture
def objects() -> dict[str, object]:
    """One object of every registered model (the topology import makes the fabric's)."""
    import_fabric(two_leaf_two_spine("adm-fabric", servers=2))
    owner = User.objects.create_user("owner")
    run = Run.objects.create(owner=owner, name="adm-run", fabric="adm-fabric", world_size=2)
    RankMapEntry.objects.create(run=run, rank=0, host="node001", nic="mlx5_0")
    TraceUpload.objects.create(run=run, kind="kineto", filename="trace.json")
    token, clear = issue_token(owner, "ci")
    now = datetime.now(UTC)
    episode = Episode.objects.create(fabric="adm-fabric", opened_at=now)
    alert = Alert.objects.create(fingerprint="adm", fabric="adm-fabric", kind="incast", key="leaf-r0:1",
                                 state=Alert.State.FIRING, active_since=now, last_true=now, episode=episode)
    transition = AlertTransition.objects.create(alert=alert, from_state="pending", to_state="firing", at=now)
    receiver = Receiver.objects.create(name="hook", kind="webhook", url="https://chat.example/hook")
    Outbox.objects.create(transition=transition, receiver=receiver, payload={}, created_at=now, next_attempt_at=now)
    group = NotificationGroup.objects.create(receiver=receiver, key="g1", labels={"fabric": "adm-fabric"},
                                             created_at=now)
    GroupMember.objects.create(group=group, fingerprint="adm", firing=True, message={}, changed_at=now)
    Rule.objects.create(fabric="adm-fabric", kind="incast")
    Silence.objects.create(fabric="adm-fabric", starts_at=now, ends_at=now)
    AllowedHost.objects.create(host="10.0.0.5", comment="on-prem Alertmanager")
    return {"token": token, "clear": clear, "run": run}


def test_every_admin_list_and_change_page_renders(root: Client, objects) -> None:
    rendered = 0
    for model, model_admin in admin.site._registry.items():
        meta = model._meta
        listing = root.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
        assert listing.status_code == 200, meta.label
        obj = model._default_manager.first()
        assert obj is not None, f"the fixture has no {meta.label}"
        change = root.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk]))
        assert change.status_code == 200, meta.label
        if model_admin.has_add_permission(change.wsgi_request):
            assert root.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_add")).status_code == 200, meta.label
        rendered += 1
    assert {Run, ApiToken, TraceUpload} <= set(admin.site._registry)
    assert rendered >= 18


def test_labels_read_as_english(root: Client, objects) -> None:
    index = root.get("/admin/").content.decode()
    for label in ("Outbox", "Alert state changes", "API tokens", "Runs", "Trace uploads", "GPUs", "NICs", "Switches"):
        assert f">{label}</a>" in index, label
    for wrong in ("Outboxs", "Gpus", "Nics", "Api tokens", "Switchs"):
        assert wrong not in index, wrong
    assert "fabricmon administration" in index


def test_a_tokens_secret_is_never_shown_and_tokens_are_revoked_not_made(root: Client, objects) -> None:
    token: ApiToken = objects["token"]  # type: ignore[assignment]
    for url in (reverse("admin:jobs_apitoken_changelist"),
                reverse("admin:jobs_apitoken_change", args=[token.pk])):
        page = root.get(url).content.decode()
        assert f"fmj_{token.prefix}_…" in page
        assert token.digest not in page and objects["clear"] not in page
    assert root.get(reverse("admin:jobs_apitoken_add")).status_code == 403
    resp = root.post(reverse("admin:jobs_apitoken_changelist"),
                     {"action": "revoke", "_selected_action": [token.pk]}, follow=True)
    token.refresh_from_db()
    assert resp.status_code == 200 and token.revoked_at is not None and "1 token revoked" in resp.content.decode()


def test_a_run_is_edited_but_what_the_server_measured_is_not(root: Client, objects) -> None:
    run: Run = objects["run"]  # type: ignore[assignment]
    url = reverse("admin:jobs_run_change", args=[run.pk])
    page = root.get(url).content.decode()
    assert "1 rank mapped" in page and f"/phases/runs/{run.pk}/" in page
    resp = root.post(url, {"name": "renamed", "tags": '["ep=8"]', "state": "finished", "fabric": "adm-fabric",
                           "world_size": "2", "ended_at_0": "", "ended_at_1": "", "stored_bytes": "999",
                           "uploads-TOTAL_FORMS": "1", "uploads-INITIAL_FORMS": "1", "uploads-MIN_NUM_FORMS": "0",
                           "uploads-MAX_NUM_FORMS": "0", "uploads-0-id": str(run.uploads.get().pk),
                           "uploads-0-run": str(run.pk)})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    run.refresh_from_db()
    assert (run.name, run.tags, run.state, run.stored_bytes) == ("renamed", ["ep=8"], "finished", 0)
