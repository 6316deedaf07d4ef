"""Shared fixtures. Integration fixtures start or reach *real* services on loopback; a missing
service is a failure with a message saying how to start it, never a skip."""

from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import settings

# Deadlines measure the machine, not the code: on a shared 2-core box a property that takes 12 ms
# under load would fail as "too slow". Properties are judged by their assertions only.
settings.register_profile("fabricmon", deadline=None)
settings.load_profile("fabricmon")


@pytest.fixture(autouse=True, scope="session")
def _phase_views_computed_in_the_request() -> None:
    """The test client's requests compute phase views in the request, so a test that writes counter
    frames and asks again sees them at once, and no refresher thread outlives a test's database.
    The refresher is tested with it set (tests/phases/test_phase_refresher.py); every server a test
    starts runs the product's default. (Here, not in tests/settings.py: xdist's workers inherit the
    DJANGO_SETTINGS_MODULE that file puts back, and load fabricmon.settings itself.)"""
    from django.conf import settings as django_settings

    django_settings.FABRICMON_PHASES_MAX_STALE_S = 0.0


@pytest.fixture(scope="session")
def redis_url() -> str:
    import redis

    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:  # pragma: no cover - environment problem
        pytest.fail(f"integration tests need a Redis at {url} ({exc}); start one: redis-server --daemonize yes")
    return url


@pytest.fixture
def redis_client(redis_url: str):
    import redis

    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def fabric_name() -> str:
    """A fabric name unique to this test, so parallel tests never share Redis keys."""
    return f"t{uuid.uuid4().hex[:10]}"


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture(scope="session")
def browser():  # type: ignore[no-untyped-def]
    """One headless Chromium per worker for every browser test (Debian's /usr/bin/chromium, never
    `playwright install`). One, because Playwright's sync API keeps its asyncio loop marked as
    running while a browser lives: a second ``sync_playwright()`` in the same worker refuses."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
