"""Prometheus Alertmanager: POST ``<base>/api/v2/alerts`` with a list of postable alerts
(https://github.com/prometheus/alertmanager/blob/main/api/v2/openapi.yaml), as Prometheus itself
sends them (its notifier and ``rules/alerting.go``):

- Alertmanager groups, times and routes alerts itself, so fabricmon does not: an Alertmanager
  receiver has one group holding all its alerts, sent at once (no group_wait) when an alert fires
  or resolves, and every ``RESEND_S`` while any fires (Prometheus' ``--rules.alert.resend-delay``).
- A firing alert's ``endsAt`` is the time of sending plus ``VALID_FOR_S`` (Prometheus:
  4 × max(evaluation interval, resend delay)): re-posted every minute, it stays active; if
  fabricmon stops (or the posts fail for four minutes), Alertmanager resolves it by itself instead
  of keeping a stale alert for ever. A resolved alert is posted with ``endsAt`` = when it resolved
  (without send_resolved it is not posted, and Alertmanager resolves it at its ``endsAt``).
- ``startsAt`` is when the condition first held (the alert went pending), Prometheus' ActiveAt.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fabricmon.alerts.transports import HttpTransport, Message, Notification

RESEND_S = 60.0
VALID_FOR_S = 4 * RESEND_S


def postable(msg: Message, now: datetime) -> dict[str, Any]:
    labels = {**msg.labels(), "source": "fabricmon"}
    alert: dict[str, Any] = {
        "labels": labels,
        "annotations": {
            "summary": msg.summary,
            **({"attribution": msg.attribution} if msg.attribution else {}),
            "fingerprint": msg.fingerprint,
        },
        "startsAt": msg.starts_at,
        "endsAt": msg.ends_at if msg.status == "resolved" and msg.ends_at
        else (now + timedelta(seconds=VALID_FOR_S)).isoformat(),
    }
    if msg.link:
        alert["generatorURL"] = msg.link
    return alert


class Transport(HttpTransport):
    def url(self, msg: Notification) -> str:
        base = self.target.url.rstrip("/")
        return base if base.endswith("/api/v2/alerts") else base + "/api/v2/alerts"

    def payload(self, msg: Notification) -> Any:
        now = datetime.now(UTC)  # endsAt counts from the post, not from the flush (retries wait)
        return [postable(a, now) for a in msg.alerts]
