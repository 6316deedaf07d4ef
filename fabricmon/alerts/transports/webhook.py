"""Generic JSON webhook: the Alertmanager v4 shape, signed per Standard Webhooks
(https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md):

    webhook-id: <message id>   webhook-timestamp: <unix s>
    webhook-signature: v1,<base64 HMAC-SHA256(key, f"{id}.{timestamp}.{body}")>

The key is the base64 part of ``whsec_…``. 410 = the endpoint asks us to stop (permanent)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from typing import Any

from fabricmon.alerts.transports import HttpTransport, Message


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


def alertmanager_v4(msg: Message, receiver: str) -> dict[str, Any]:
    labels = {"alertname": msg.kind, "fabric": msg.fabric, "scope": msg.key}
    if msg.run_name:
        labels["run"] = msg.run_name
    alert = {
        "status": "resolved" if msg.status == "resolved" else "firing",
        "labels": labels,
        "annotations": {
            "summary": msg.summary,
            **({"attribution": msg.attribution} if msg.attribution else {}),
        },
        "startsAt": msg.starts_at,
        "endsAt": msg.ends_at or "0001-01-01T00:00:00Z",
        "generatorURL": msg.link,
        "fingerprint": msg.fingerprint,
    }
    return {
        "version": "4",
        "groupKey": f"{msg.fabric}/{msg.kind}",
        "truncatedAlerts": 0,
        "status": alert["status"],
        "receiver": receiver,
        "groupLabels": {"alertname": msg.kind},
        "commonLabels": labels,
        "commonAnnotations": alert["annotations"],
        "externalURL": "",
        "alerts": [alert],
        "details": msg.details,
    }


class Transport(HttpTransport):
    def payload(self, msg: Message) -> Any:
        return alertmanager_v4(msg, self.target.name)

    def headers(self, body: bytes, msg: Message) -> dict[str, str]:
        if not self.target.secret:
            return {"webhook-id": msg.id}
        ts = int(time.time())
        return {
            "webhook-id": msg.id,
            "webhook-timestamp": str(ts),
            "webhook-signature": sign(self.target.secret, msg.id, ts, body),
        }
