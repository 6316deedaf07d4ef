"""``GET /metrics``: the Prometheus text format, for a scraper holding ``FABRICMON_METRICS_TOKEN``.

Authentication is a bearer token (Prometheus' ``authorization: {credentials_file: …}`` sends
``Authorization: Bearer <token>``), compared in constant time, before anything is read. No user
session: a scraper is not a person, and the access roles of ``base/access.py`` are for people.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from fabricmon.metrics.families import registry_for
from fabricmon.metrics.ports import exposition
from fabricmon.metrics.state import read_state


def _refused(reason: str) -> HttpResponse:
    resp = HttpResponse(f"401 Unauthorized: {reason}\n", status=401, content_type="text/plain; charset=utf-8")
    resp["WWW-Authenticate"] = 'Bearer realm="fabricmon metrics"'
    return resp


def authorized(request: HttpRequest) -> str:
    """'' when the request carries the scrape token, else why not."""
    token = str(settings.FABRICMON_METRICS_TOKEN)
    if not token:
        return "metrics are off: set FABRICMON_METRICS_TOKEN on the server"
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        return "send Authorization: Bearer <FABRICMON_METRICS_TOKEN>"
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        return "wrong scrape token"
    return ""


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    why = authorized(request)
    if why:
        return _refused(why)
    state = read_state()
    body = generate_latest(registry_for(state)) + exposition(
        [f.ports for f in state.fabrics if f.ports is not None]).encode()
    return HttpResponse(body, content_type=CONTENT_TYPE_PLAIN_0_0_4)  # the format every Prometheus 2.x reads
