"""A receiver's URL (a chat hook URL is the credential) and webhook secret in the admin: shown
masked (host + ``••••`` + the last 4; "set"), never rendered into the page or the form, kept when
the field is left empty, replaced when a new one is typed; the receivers page never shows them."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from fabricmon.alerts.models import Receiver
from fabricmon.base.sealed import reveal

pytestmark = pytest.mark.django_db
HOOK = "https://hooks.slack.com/services/T0001/B0002/hooktoken9999"
WHSEC = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def post_data(rcv: Receiver, **changes: str) -> dict[str, str]:
    data = {"name": rcv.name, "kind": rcv.kind, "url": "", "secret": "", "fabric": rcv.fabric, "kinds": "[]",
            "owner": "", "send_resolved": "on", "last_error": ""}
    data.update(changes)
    return data


def test_admin_shows_receiver_secrets_masked_and_keeps_them(admin_client: Client) -> None:
    rcv = Receiver.objects.create(name="chat", kind="webhook", url=HOOK, secret=WHSEC)
    listing = admin_client.get(reverse("admin:alerts_receiver_changelist")).content.decode()
    url = reverse("admin:alerts_receiver_change", args=[rcv.pk])
    page = admin_client.get(url).content.decode()
    for html in (listing, page):
        assert HOOK not in html and WHSEC not in html and "hooktoken" not in html and "services/T0001" not in html
    assert "https://hooks.slack.com/••••9999" in listing
    assert "stored: https://hooks.slack.com/••••9999; leave empty" in page and "stored: ••••LaSw" in page
    # empty fields keep both; a new URL replaces it; "clear secret" empties the secret
    assert admin_client.post(url, post_data(rcv, name="chat2")).status_code == 302
    rcv.refresh_from_db()
    assert (rcv.name, reveal(rcv.url), reveal(rcv.secret)) == ("chat2", HOOK, WHSEC)
    new = "https://chat.example.com/hooks/abcdefgh5678"
    assert admin_client.post(url, post_data(rcv, url=new, clear_secret="on")).status_code == 302
    rcv.refresh_from_db()
    assert (reveal(rcv.url), rcv.secret) == (new, "")
    bad = admin_client.post(url, post_data(rcv, url="not a url"))
    assert bad.status_code == 200 and "Enter a valid URL" in bad.content.decode()


def test_a_new_receiver_needs_a_url(admin_client: Client) -> None:
    resp = admin_client.post(reverse("admin:alerts_receiver_add"), post_data(Receiver(name="x", kind="slack")))
    assert resp.status_code == 200 and "a receiver needs a URL" in resp.content.decode()
    assert not Receiver.objects.exists()


def test_receivers_page_never_shows_the_url(admin_client: Client) -> None:
    Receiver.objects.create(name="chat", kind="slack", url=HOOK)
    html = admin_client.get(reverse("alerts:receivers")).content.decode()
    assert "chat" in html and HOOK not in html and "hooktoken" not in html
