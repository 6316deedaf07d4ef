"""Delivery against hostile and broken receivers — real TCP/HTTP servers on 127.0.0.1 — ends within
its deadline, is sent exactly once (counted at the receiver, by webhook-id), and leaves every row
in a final or a due state with the reason on the row and on the receiver's page.

    outbox row ──deliver_due──▶ netguard.post ──TCP──▶ RawReceiver (drip | 300 MB | garbage | …)
        ▲                            │ one deadline, a response cap
        └── sent | pending (backoff) | failed (permanent, or out of attempts) ◀─ classify
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from raw_receiver import RawReceiver, drip, huge, raw

from fabricmon.alerts import delivery
from fabricmon.alerts.models import Outbox, Receiver
from fabricmon.alerts.transports import Message
from tests.alerts.connects import CONNECTS

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
DEADLINE_S = 6.0  # > the 5 s between dripped bytes: a per-read timeout would never fire
SLACK_S = 3.0  # scheduling on a loaded 2-core machine; a drip without the deadline runs for minutes
OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"


def message(n: int = 1) -> Message:
    return Message(
        id=f"msg_{n}",
        fingerprint="abc",
        fabric="su1",
        kind="incast",
        key="leaf-r3:Ethernet7",
        status="firing",
        summary="incast on leaf-r3:Ethernet7",
        starts_at=T0.isoformat(),
    )


def enqueue(rcv: Receiver, n: int = 1) -> Outbox:
    return Outbox.objects.create(
        receiver=rcv, payload=dataclasses.asdict(message(n)), created_at=T0, next_attempt_at=T0
    )


@pytest.fixture
def hostile(settings, monkeypatch) -> Iterator[list[RawReceiver]]:
    # One fixed point of the retry jitter: these tests are about the exchange, not the spread of
    # retries (test_alert_grouping.py checks that against a failing receiver).
    monkeypatch.setattr(delivery, "jitter", lambda: 0.9)
    settings.FABRICMON_ALERTS_ALLOW_HOSTS = ["127.0.0.1"]
    settings.FABRICMON_ALERTS_DELIVERY_DEADLINE_S = DEADLINE_S
    started: list[RawReceiver] = []
    yield started
    for r in started:
        r.stop()


def start(started: list[RawReceiver], answer) -> RawReceiver:
    r = RawReceiver(answer)
    started.append(r)
    return r


def timed_deliver_due(now: datetime) -> float:
    t = time.monotonic()
    delivery.deliver_due(now)
    return time.monotonic() - t


@pytest.mark.django_db(transaction=True)  # the in-flight delivery runs in a thread of its own
def test_drip_fed_status_line_ends_at_the_deadline_and_is_never_handed_out_in_flight(hostile) -> None:
    stop = threading.Event()
    recv = start(hostile, drip(OK_HEAD + b"Content-Length: 2\r\n\r\nok", every_s=5.0, stop=stop))
    row = enqueue(Receiver.objects.create(name="drip", kind="webhook", url=recv.url, secret=SECRET))
    took: list[float] = []
    first = threading.Thread(target=lambda: took.append(timed_deliver_due(T0)))
    first.start()
    recv.wait_for_requests(1)
    # A second worker, later (in the outbox's clock) than any delivery can take but within the
    # lease, finds the row in flight and gets nothing — the "same webhook-id 3 times".
    later = T0 + timedelta(seconds=DEADLINE_S + 30)
    assert delivery.deliver_due(later) == 0
    assert delivery.claim(row.id, later) == 0
    first.join(60)
    stop.set()
    assert took and took[0] <= DEADLINE_S + SLACK_S, took
    assert recv.webhook_ids() == ["msg_1"]  # exactly once
    assert recv.exchanges[0].client_gone or recv.exchanges[0].bytes_sent < 20  # cut off mid-status-line
    row.refresh_from_db()
    assert row.status == Outbox.Status.PENDING and row.attempts == 1 and row.claimed_until is None
    assert "deadline" in row.last_error
    assert row.next_attempt_at == T0 + timedelta(seconds=delivery.backoff_s(1))


def test_a_200_whose_body_drips_is_delivered_within_the_deadline_once(hostile) -> None:
    stop = threading.Event()
    head = OK_HEAD + b"Content-Length: 100\r\n\r\n"
    recv = start(hostile, _head_then(head, drip(b"x" * 100, every_s=5.0, stop=stop)))
    row = enqueue(Receiver.objects.create(name="drip-body", kind="slack", url=recv.url))
    took = timed_deliver_due(T0)
    stop.set()
    assert took <= DEADLINE_S + SLACK_S
    row.refresh_from_db()
    assert row.status == Outbox.Status.SENT  # the status line was the answer; the body is not needed
    delivery.deliver_due(T0 + timedelta(hours=1))
    assert len(recv.exchanges) == 1


def _head_then(head: bytes, rest):
    def answer(conn, x):
        conn.sendall(head)
        rest(conn, x)

    return answer


@pytest.mark.parametrize(("status", "outcome"), [(200, Outbox.Status.SENT), (503, Outbox.Status.PENDING)])
def test_a_300_mb_answer_is_read_only_up_to_the_cap(hostile, status: int, outcome: str) -> None:
    size = 300 * 1024 * 1024
    head = f"HTTP/1.1 {status} X\r\nContent-Length: {size}\r\n\r\n".encode()
    recv = start(hostile, huge(head, size))
    row = enqueue(Receiver.objects.create(name="huge", kind="webhook", url=recv.url))
    tracemalloc.start()
    try:
        took = timed_deliver_due(T0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    row.refresh_from_db()
    assert row.status == outcome and row.attempts == 1
    assert took <= DEADLINE_S + SLACK_S
    assert peak < 4 * 1024 * 1024, f"peak Python allocation {peak / 1e6:.1f} MB while reading the answer"
    recv.wait_for_requests(1)
    deadline = time.monotonic() + 10
    while not recv.exchanges[0].client_gone and time.monotonic() < deadline:
        time.sleep(0.05)
    # the client hung up after the cap: the receiver got a few socket buffers out, not 300 MB
    assert recv.exchanges[0].client_gone and recv.exchanges[0].bytes_sent < 32 * 1024 * 1024
    assert len(recv.exchanges) == 1


GARBAGE = {
    "ssh banner": b"SSH-2.0-OpenSSH_9.6\r\n",
    "binary": bytes(range(256)) * 4 + b"\r\n",
    "endless status line": b"HTTP/1.1 200 " + b"A" * 70_000 + b"\r\n\r\n",
    "too many headers": OK_HEAD + b"".join(b"X-%d: y\r\n" % i for i in range(150)) + b"\r\n",
}


@pytest.mark.parametrize("what", sorted(GARBAGE))
def test_an_answer_that_is_not_http_fails_for_good_after_one_request(hostile, what: str) -> None:
    recv = start(hostile, raw(GARBAGE[what]))
    rcv = Receiver.objects.create(name="garbage", kind="webhook", url=recv.url)
    row = enqueue(rcv)
    assert timed_deliver_due(T0) <= DEADLINE_S + SLACK_S
    row.refresh_from_db()
    rcv.refresh_from_db()
    assert row.status == Outbox.Status.FAILED and "not HTTP" in row.last_error
    assert rcv.disabled and "not HTTP" in rcv.last_error
    delivery.deliver_due(T0 + timedelta(hours=1))
    assert len(recv.exchanges) == 1  # never sent again


def test_500_then_200_is_sent_exactly_once(hostile, receiver) -> None:
    receiver.respond = lambda seen: (500, {}, b"oops") if len(receiver.requests) == 1 else (200, {}, b"ok")
    row = enqueue(Receiver.objects.create(name="flaky", kind="webhook", url=receiver.url, secret=SECRET))
    delivery.deliver_due(T0)
    row.refresh_from_db()
    assert row.status == Outbox.Status.PENDING and "500" in row.last_error and "oops" in row.last_error
    delivery.deliver_due(T0 + timedelta(seconds=1))  # not due yet: backoff
    assert len(receiver.requests) == 1
    for s in range(5, 600, 5):
        delivery.deliver_due(T0 + timedelta(seconds=s))
    assert [r.headers["webhook-id"] for r in receiver.requests] == ["msg_1", "msg_1"]
    row.refresh_from_db()
    assert row.status == Outbox.Status.SENT and row.attempts == 2 and row.last_error == ""


def receivers_page() -> str:
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(admin)
    resp = client.get("/alerts/receivers/")
    assert resp.status_code == 200
    return resp.content.decode()


def test_400_fails_for_good_and_the_receiver_page_says_why(hostile, receiver) -> None:
    receiver.respond = lambda seen: (400, {}, b'{"error": "bad payload"}')
    rcv = Receiver.objects.create(name="strict", kind="webhook", url=receiver.url)
    row = enqueue(rcv)
    for s in range(0, 3600, 60):
        delivery.deliver_due(T0 + timedelta(seconds=s))
    assert len(receiver.requests) == 1
    row.refresh_from_db()
    assert row.status == Outbox.Status.FAILED and "400" in row.last_error
    page = receivers_page()
    assert "disabled: strict: unexpected status code 400" in page and "bad payload" in page


def test_retryable_failures_give_up_after_max_attempts(hostile, receiver, settings) -> None:
    settings.FABRICMON_ALERTS_MAX_ATTEMPTS = 3
    receiver.respond = lambda seen: (503, {}, b"down")
    rcv = Receiver.objects.create(name="down", kind="webhook", url=receiver.url)
    row = enqueue(rcv)
    for s in range(0, 120, 5):
        delivery.deliver_due(T0 + timedelta(seconds=s))
    assert len(receiver.requests) == 3
    row.refresh_from_db()
    assert row.status == Outbox.Status.FAILED and row.attempts == 3
    assert row.last_error.startswith("gave up after 3 attempts") and "503" in row.last_error
    rcv.refresh_from_db()
    assert not rcv.disabled  # the receiver may be back for the next alert
    assert "gave up after 3 attempts" in receivers_page()


@pytest.mark.parametrize(
    ("url", "secret", "reason"),
    [
        ("{base}", "whsec_not base64!", "whsec_"),
        ("{base}", "whsec_", "whsec_"),
        ("http://127.0.0.1:99999/hook", "", "invalid URL"),
        ("{base}/a\r\nX-Injected: 1", "", "invalid URL"),
    ],
)
def test_a_broken_receiver_setting_fails_for_good_without_a_request(hostile, receiver, url, secret, reason):
    full = url.format(base=receiver.url)
    rcv = Receiver.objects.create(name="broken", kind="webhook", url=full, secret=secret)
    row = enqueue(rcv)
    delivery.deliver_due(T0)
    row.refresh_from_db()
    assert row.status == Outbox.Status.FAILED and reason in row.last_error
    assert "X-Injected" not in row.last_error  # the URL (a chat hook's key) is never quoted
    assert receiver.requests == []


def test_refused_or_dropped_connections_are_retried(hostile) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/hook"
    hangup = start(hostile, raw(b""))  # accepts, reads the request, closes without a word
    rows = [
        enqueue(Receiver.objects.create(name="refused", kind="webhook", url=closed), 1),
        enqueue(Receiver.objects.create(name="hangup", kind="webhook", url=hangup.url), 2),
    ]
    delivery.deliver_due(T0)
    for row in rows:
        row.refresh_from_db()
        assert row.status == Outbox.Status.PENDING and "connection failed" in row.last_error, row.last_error
    assert len(hangup.exchanges) == 1


@pytest.mark.parametrize(
    "host", ["[::127.0.0.1]", "[::ffff:127.0.0.1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::1]", "[::1]"]
)
def test_embedded_loopback_urls_are_refused_without_connecting(settings, receiver, host: str) -> None:
    settings.FABRICMON_ALERTS_ALLOW_HOSTS = []
    rcv = Receiver.objects.create(name="sneaky", kind="webhook", url=f"http://{host}:{receiver.port}/hook")
    CONNECTS.clear()
    error = delivery.send_test(rcv)
    assert "not allowed" in error, error
    assert not any(port == receiver.port for _, port in CONNECTS)
    assert receiver.requests == []


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_claimers_never_both_win(hostile) -> None:
    rcv = Receiver.objects.create(name="hook", kind="webhook", url="http://127.0.0.1:9/hook")
    rows = [enqueue(rcv, n).id for n in range(40)]
    wins: dict[str, list[int]] = {"a": [], "b": []}
    barrier = threading.Barrier(2)

    def claimer(name: str) -> None:
        from django.db import OperationalError, connection

        try:
            for row_id in rows:
                barrier.wait(30)
                for _ in range(100):
                    # the tests' shared-cache in-memory SQLite answers a concurrent write "table is
                    # locked" at once (a file database waits): the UPDATE did nothing, ask again
                    try:
                        won = delivery.claim(row_id, T0)
                        break
                    except OperationalError:
                        time.sleep(0.01)
                if won:
                    wins[name].append(row_id)
        finally:
            connection.close()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in wins]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(wins["a"] + wins["b"]) == rows  # every row claimed once, by exactly one of them
    assert not set(wins["a"]) & set(wins["b"])
    assert set(Outbox.objects.values_list("attempts", flat=True)) == {1}


def test_a_claim_past_its_lease_cannot_overwrite_the_next_one(hostile) -> None:
    row = enqueue(Receiver.objects.create(name="hook", kind="webhook", url="http://127.0.0.1:9/hook"))
    first = delivery.claim(row.id, T0)
    # its worker froze; the lease ends and another worker claims the row
    after = T0 + timedelta(seconds=delivery.lease_s() + 1)
    assert delivery.hand_back_expired(after) == 1
    second = delivery.claim(row.id, after)
    assert (first, second) == (1, 2)
    assert delivery._finish(row.id, first, status=Outbox.Status.SENT) is False  # the stale outcome
    row.refresh_from_db()
    assert row.status == Outbox.Status.SENDING and row.attempts == 2


def test_a_redirect_loop_fails_for_good(hostile, receiver) -> None:
    receiver.respond = lambda seen: (302, {"Location": receiver.url}, b"")
    row = enqueue(Receiver.objects.create(name="loop", kind="webhook", url=receiver.url))
    delivery.deliver_due(T0)
    row.refresh_from_db()
    assert row.status == Outbox.Status.FAILED and "redirects" in row.last_error
    assert len(receiver.requests) == 4  # the request and 3 hops, then no more
