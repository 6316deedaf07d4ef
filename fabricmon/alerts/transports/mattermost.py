"""Mattermost incoming webhook: Slack-compatible ``text`` + ``attachments``, one attachment per
alert (https://developers.mattermost.com/integrate/webhooks/incoming/); text capped at 16,383
runes."""

from __future__ import annotations

from typing import Any

from fabricmon.alerts.transports import CHAT_ALERTS, HttpTransport, Notification

COLOR = {"firing": "#d9534f", "resolved": "#5cb85c"}


class Transport(HttpTransport):
    def payload(self, msg: Notification) -> Any:
        return {
            "text": f"**{msg.title}**\n{msg.summary}"[:16383],
            "attachments": [
                {"color": COLOR.get(a.status, "#999999"), "title": a.summary[:300],
                 "fields": [{"short": True, "title": k, "value": v} for k, v in a.facts()]}
                for a in msg.alerts[:CHAT_ALERTS]
            ],
            "props": {"fingerprints": [a.fingerprint for a in msg.alerts], "group_key": msg.group_key},
        }
