"""Prometheus Alertmanager: POST ``<base>/api/v2/alerts`` with a list of postable alerts
(https://github.com/prometheus/alertmanager/blob/main/api/v2/openapi.yaml). Alertmanager then
does its own grouping and routing; a resolved alert is sent with ``endsAt`` = now."""

from __future__ import annotations

from typing import Any

from fabricmon.alerts.transports import HttpTransport, Message


class Transport(HttpTransport):
    def url(self, msg: Message) -> str:
        base = self.target.url.rstrip("/")
        return base if base.endswith("/api/v2/alerts") else base + "/api/v2/alerts"

    def payload(self, msg: Message) -> Any:
        labels = {"alertname": msg.kind, "fabric": msg.fabric, "scope": msg.key, "source": "fabricmon"}
        if msg.run_name:
            labels["run"] = msg.run_name
        alert: dict[str, Any] = {
            "labels": labels,
            "annotations": {
                "summary": msg.summary,
                **({"attribution": msg.attribution} if msg.attribution else {}),
                "fingerprint": msg.fingerprint,
            },
            "startsAt": msg.starts_at,
        }
        if msg.ends_at:
            alert["endsAt"] = msg.ends_at
        if msg.link:
            alert["generatorURL"] = msg.link
        return [alert]
