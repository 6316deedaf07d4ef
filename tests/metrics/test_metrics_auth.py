"""``/metrics`` refuses before it reads anything: no token configured, no or a wrong bearer token,
another method. (The scrape itself: tests/metrics/test_prometheus_scrape.py, against real services.)"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("configured", "header", "reason"),
    [
        ("", "Bearer anything", "metrics are off: set FABRICMON_METRICS_TOKEN"),
        ("s3cret", "", "send Authorization: Bearer"),
        ("s3cret", "Basic czNjcmV0", "send Authorization: Bearer"),
        ("s3cret", "Bearer s3cre", "wrong scrape token"),
    ],
)
def test_refused_with_the_reason(client, settings, configured, header, reason):
    settings.FABRICMON_METRICS_TOKEN = configured
    resp = client.get("/metrics", **({"HTTP_AUTHORIZATION": header} if header else {}))
    assert resp.status_code == 401
    assert resp["WWW-Authenticate"].startswith("Bearer")
    assert reason in resp.content.decode()


def test_only_get(client, settings):
    settings.FABRICMON_METRICS_TOKEN = "s3cret"
    assert client.post("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 405
