"""Per-token rate limit of the ingest API on the real Redis: a token over its burst gets 429 with
Retry-After and the limit in words; another token is unaffected; with Redis unreachable requests
pass (the limiter's store down must not stop ingest)."""

from __future__ import annotations

import socket

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from fabricmon.jobs import ratelimit
from fabricmon.jobs.tokens import issue_token

pytestmark = pytest.mark.integration


@pytest.fixture
def tokens(db, settings, redis_url):
    settings.REDIS_URL = redis_url
    settings.FABRICMON_INGEST_RATE_PER_S = 0.001  # one request back every ~17 minutes
    settings.FABRICMON_INGEST_BURST = 3
    users = get_user_model()
    alice, bob = users.objects.create_user("alice"), users.objects.create_user("bob")
    return issue_token(alice)[1], issue_token(bob)[1]


def _get(token: str):
    return Client().get("/jobs/api/runs", HTTP_AUTHORIZATION=f"Bearer {token}")


def test_a_token_over_its_burst_gets_429_with_retry_after(tokens) -> None:
    alice, bob = tokens
    assert [_get(alice).status_code for _ in range(3)] == [200, 200, 200]
    over = _get(alice)
    assert over.status_code == 429
    body = over.json()
    assert (
        body["field"] == "Authorization"
        and "rate limit" in body["error"]
        and "per API token" in body["error"]
    )
    assert int(over["Retry-After"]) == body["retry_after_s"] >= 1
    assert _get(bob).status_code == 200  # buckets are per token
    assert _get("fmj_nope_nope").status_code == 401  # a bad token is refused before any bucket


def test_requests_pass_when_redis_is_unreachable(tokens, settings) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"  # closed: connections are refused
    alice, _ = tokens
    assert [_get(alice).status_code for _ in range(5)] == [200] * 5


def test_a_rate_of_zero_turns_the_limit_off(tokens, settings) -> None:
    settings.FABRICMON_INGEST_RATE_PER_S = 0
    assert ratelimit.take("any:1") == 0.0
    assert [_get(tokens[0]).status_code for _ in range(5)] == [200] * 5
