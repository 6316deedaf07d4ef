"""Delivery against real HTTP receivers on 127.0.0.1 and a real Alertmanager.

A controllable clock (``now``) drives retries: "ten minutes of 503" is ten simulated minutes of
``deliver_due`` ticks, each a real HTTP exchange whenever a row is due."""

from __future__ import annotations

import dataclasses
import json
import random
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks import Webhook

from fabricmon.alerts import delivery
from fabricmon.alerts.models import Outbox, Receiver
from fabricmon.alerts.netguard import Policy, RefusedAddressError, post
from fabricmon.alerts.transports import Message, Notification, Target, transport_for
from tests.alerts.connects import CONNECTS

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def message(status: str = "firing") -> Message:
    return Message(
        id="msg_1_1",
        fingerprint="abc",
        fabric="su1",
        kind="moving_incast",
        key="fabric",
        status=status,
        summary="moving incast: hot set leaf-r3:Ethernet7",
        starts_at=T0.isoformat(),
        details={"trajectory": ["leaf-r1:Ethernet2", "leaf-r3:Ethernet7"]},
    )


def enqueue(rcv: Receiver, msg: Message | None = None) -> Outbox:
    return Outbox.objects.create(
        receiver=rcv, payload=dataclasses.asdict(msg or message()), created_at=T0, next_attempt_at=T0
    )


def run_clock(receiver, start: datetime, seconds: int, step_s: int = 1) -> None:
    for s in range(0, seconds, step_s):
        now = start + timedelta(seconds=s)
        receiver.clock = s
        delivery.deliver_due(now)


def test_503_for_ten_minutes_then_200_is_delivered_exactly_once(receiver, allow_loopback, monkeypatch) -> None:
    monkeypatch.setattr(delivery, "jitter", random.Random(18).random)  # one draw of the retry jitter
    rcv = Receiver.objects.create(name="hook", kind="webhook", url=receiver.url, secret=SECRET)
    row = enqueue(rcv)
    receiver.respond = lambda seen: (503, {}, b"down") if seen.clock < 600 else (200, {}, b"ok")
    run_clock(receiver, T0, 1500, step_s=5)
    ok = [r for r in receiver.requests if r.clock >= 600]
    assert len(ok) == 1, [r.clock for r in receiver.requests]
    assert len(receiver.requests) >= 5  # it kept retrying through the outage
    assert {r.headers["webhook-id"] for r in receiver.requests} == {"msg_1_1"}  # same idempotency key
    row.refresh_from_db()
    assert row.status == Outbox.Status.SENT and row.last_error == ""
    rcv.refresh_from_db()
    assert not rcv.disabled


def test_429_retry_after_is_honoured(receiver, allow_loopback) -> None:
    rcv = Receiver.objects.create(name="slack", kind="slack", url=receiver.url)
    enqueue(rcv)
    receiver.respond = lambda seen: (
        (429, {"Retry-After": "120"}, b"slow down") if len(receiver.requests) == 1 else (200, {}, b"ok")
    )
    run_clock(receiver, T0, 300)
    assert receiver.requests[0].clock == 0
    assert len(receiver.requests) == 2 and receiver.requests[1].clock >= 120


def test_discord_json_retry_after_and_permanent_404_disables_receiver(receiver, allow_loopback) -> None:
    rcv = Receiver.objects.create(name="discord", kind="discord", url=receiver.url)
    enqueue(rcv)
    answers = iter(
        [(429, {}, b'{"retry_after": 30.5, "global": false}'), (404, {}, b'{"message": "Unknown Webhook"}')]
    )
    receiver.respond = lambda seen: next(answers)
    run_clock(receiver, T0, 120)
    assert len(receiver.requests) == 2 and receiver.requests[1].clock >= 30.5
    rcv.refresh_from_db()
    assert rcv.disabled and "404" in rcv.last_error and receiver.url not in rcv.last_error
    assert Outbox.objects.get().status == Outbox.Status.FAILED


def test_slack_invalid_token_is_permanent_and_test_button_reports_it(receiver, allow_loopback) -> None:
    rcv = Receiver.objects.create(name="slack", kind="slack", url=receiver.url)
    receiver.respond = lambda seen: (400, {}, b"invalid_token")
    error = delivery.send_test(rcv, T0)
    assert "invalid_token" in error
    rcv.refresh_from_db()
    assert rcv.disabled
    receiver.respond = lambda seen: (200, {}, b"ok")
    assert delivery.send_test(rcv, T0) == ""  # fixed hook: the test button re-enables it


def test_generic_webhook_signature_verifies_with_standard_webhooks(receiver, allow_loopback) -> None:
    rcv = Receiver.objects.create(name="generic", kind="webhook", url=receiver.url, secret=SECRET)
    enqueue(rcv)
    delivery.deliver_due(T0)
    (seen,) = receiver.requests
    payload = Webhook(SECRET).verify(seen.body, seen.headers)  # the independent verifier
    assert payload["version"] == "4" and payload["alerts"][0]["labels"]["alertname"] == "moving_incast"
    tampered = seen.body.replace(b"moving", b"static")
    with pytest.raises(Exception, match=r"(?i)signature"):
        Webhook(SECRET).verify(tampered, seen.headers)


@pytest.mark.parametrize("kind", ["slack", "msteams", "mattermost", "discord"])
def test_chat_payloads_arrive_in_each_format(receiver, allow_loopback, kind: str) -> None:
    note = Notification.of("grp_1_1", kind, [message()], {"alertname": "moving_incast", "fabric": "su1"})
    transport_for(kind, Target(kind, receiver.url), Policy(("127.0.0.1",))).notify(note)
    body = receiver.requests[0].json()
    assert isinstance(body, dict)
    if kind == "slack":
        assert body["blocks"][0]["type"] == "header" and "moving incast" in body["text"]
    elif kind == "msteams":
        card = body["attachments"][0]
        assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
        assert card["content"]["body"][2]["type"] == "FactSet"
    elif kind == "mattermost":
        assert "**" in body["text"] and body["attachments"][0]["fields"]
    else:
        assert len(body["content"]) <= 2000 and body["embeds"][0]["title"]
    assert "leaf-r1" in json.dumps(body)  # the trajectory reached the message


def test_real_alertmanager_lists_the_alert(alertmanager: str, allow_loopback) -> None:
    rcv = Receiver.objects.create(name="am", kind="alertmanager", url=alertmanager)
    now = datetime.now(UTC)
    msg = dataclasses.replace(message(), starts_at=now.isoformat())
    Outbox.objects.create(receiver=rcv, payload=dataclasses.asdict(msg), created_at=now, next_attempt_at=now)
    assert delivery.deliver_due(now) == 1
    with urllib.request.urlopen(alertmanager + "/api/v2/alerts", timeout=5) as resp:
        alerts = json.loads(resp.read())
    mine = [a for a in alerts if a["labels"].get("source") == "fabricmon"]
    assert len(mine) == 1
    assert mine[0]["labels"]["alertname"] == "moving_incast" and mine[0]["labels"]["fabric"] == "su1"
    assert mine[0]["status"]["state"] == "active"


def test_ssrf_private_ip_is_refused_without_connecting(settings) -> None:
    settings.FABRICMON_ALERTS_ALLOW_HOSTS = []
    rcv = Receiver.objects.create(name="evil", kind="webhook", url="http://10.255.255.1:8080/hook")
    CONNECTS.clear()
    error = delivery.send_test(rcv, T0)
    assert "not allowed" in error and "10.255.255.1" in error
    assert not any(ip == "10.255.255.1" for ip, _ in CONNECTS)
    rcv.refresh_from_db()
    assert rcv.disabled


def test_ssrf_redirect_to_metadata_is_not_followed(receiver, allow_loopback) -> None:
    receiver.respond = lambda seen: (302, {"Location": "http://169.254.169.254/latest/meta-data/"}, b"")
    CONNECTS.clear()
    with pytest.raises(RefusedAddressError, match=r"169.254.169.254"):
        post(receiver.url, b"{}", {}, policy=Policy(("127.0.0.1",)))
    assert len(receiver.requests) == 1
    assert ("127.0.0.1", receiver.port) in CONNECTS
    assert not any(ip == "169.254.169.254" for ip, _ in CONNECTS)
    # Even a range that covers link-local does not open the metadata address.
    with pytest.raises(RefusedAddressError):
        post(receiver.url, b"{}", {}, policy=Policy(("127.0.0.1", "169.254.0.0/16")))


def test_ssrf_name_resolving_to_loopback_is_refused_when_not_allowed(receiver, settings) -> None:
    settings.FABRICMON_ALERTS_ALLOW_HOSTS = ["hooks.example.com"]
    rcv = Receiver.objects.create(name="rebind", kind="slack", url=f"http://localhost:{receiver.port}/hook")
    CONNECTS.clear()
    error = delivery.send_test(rcv, T0)
    assert "localhost resolves to" in error and "not allowed" in error
    assert receiver.requests == []
    assert not any(port == receiver.port for _, port in CONNECTS)


def test_claim_is_atomic(receiver, allow_loopback) -> None:
    rcv = Receiver.objects.create(name="hook", kind="webhook", url=receiver.url)
    row = enqueue(rcv)
    assert delivery.claim(row.id, T0) == 1  # the first attempt
    assert delivery.claim(row.id, T0) == 0  # a second worker gets nothing
    assert delivery.deliver(row.id, T0) == ""  # and cannot send it
    assert receiver.requests == []
