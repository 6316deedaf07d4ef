"""Mattermost incoming webhook: Slack-compatible ``text`` + ``attachments``
(https://developers.mattermost.com/integrate/webhooks/incoming/); text capped at 16,383 runes."""

from __future__ import annotations

from typing import Any

from fabricmon.alerts.transports import HttpTransport, Message


class Transport(HttpTransport):
    def payload(self, msg: Message) -> Any:
        color = {"firing": "#d9534f", "resolved": "#5cb85c"}.get(msg.status, "#999999")
        return {
            "text": f"**{msg.title}**\n{msg.summary}"[:16383],
            "attachments": [
                {"color": color, "fields": [{"short": True, "title": k, "value": v} for k, v in msg.facts()]}
            ],
            "props": {"fingerprint": msg.fingerprint},
        }
