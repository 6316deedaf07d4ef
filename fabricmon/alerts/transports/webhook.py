"""Generic JSON webhook: Alertmanager's webhook body (version 4: one group and its alerts), signed
per Standard Webhooks (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md):

    webhook-id: <notification id>   webhook-timestamp: <unix s>
    webhook-signature: v1,<base64 HMAC-SHA256(key, f"{id}.{timestamp}.{body}")>

The key is the base64 part of ``whsec_…``. 410 = the endpoint asks us to stop (permanent)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from typing import Any

from fabricmon.alerts.transports import HttpTransport, Message, Notification


def signing_key(secret: str) -> bytes:
    """The key of a ``whsec_<base64>`` secret; ValueError (a permanent failure) if it is not one."""
    try:
        key = base64.b64decode(secret.strip().removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("the webhook secret is not a whsec_<base64> key") from exc
    if not key:
        raise ValueError("the webhook secret is empty after whsec_")
    return key


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    key = signing_key(secret)
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def _v4_alert(msg: Message) -> dict[str, Any]:
    return {
        "status": "resolved" if msg.status == "resolved" else "firing",
        "labels": msg.labels(),
        "annotations": {
            "summary": msg.summary,
            **({"attribution": msg.attribution} if msg.attribution else {}),
        },
        "startsAt": msg.starts_at,
        "endsAt": msg.ends_at or "0001-01-01T00:00:00Z",
        "generatorURL": msg.link,
        "fingerprint": msg.fingerprint,
        "details": msg.details,  # ours (the moving incast's trajectory); receivers may ignore it
    }


def _common(maps: list[dict[str, str]]) -> dict[str, str]:
    """The pairs every map has (Alertmanager's commonLabels / commonAnnotations)."""
    if not maps:
        return {}
    return {k: v for k, v in maps[0].items() if all(m.get(k) == v for m in maps[1:])}


def alertmanager_v4(msg: Notification, receiver: str) -> dict[str, Any]:
    """Alertmanager's webhook body (https://prometheus.io/docs/alerting/latest/configuration/
    #webhook_config): one group, every alert of it."""
    alerts = [_v4_alert(a) for a in msg.alerts]
    return {
        "version": "4",
        "groupKey": msg.group_key,
        "truncatedAlerts": msg.truncated,
        "status": "resolved" if msg.status == "resolved" else "firing",
        "receiver": msg.receiver or receiver,
        "groupLabels": msg.group_labels,
        "commonLabels": _common([a["labels"] for a in alerts]),
        "commonAnnotations": _common([a["annotations"] for a in alerts]),
        "externalURL": "",
        "alerts": alerts,
    }


class Transport(HttpTransport):
    def payload(self, msg: Notification) -> Any:
        return alertmanager_v4(msg, self.target.name)

    def headers(self, body: bytes, msg: Notification) -> dict[str, str]:
        if not self.target.secret:
            return {"webhook-id": msg.id}
        ts = int(time.time())
        return {
            "webhook-id": msg.id,
            "webhook-timestamp": str(ts),
            "webhook-signature": sign(self.target.secret, msg.id, ts, body),
        }
