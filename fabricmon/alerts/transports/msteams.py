"""Microsoft Teams via Workflows: a message with one Adaptive Card 1.2 (a FactSet), as
healthchecks' ``msteamsw`` and Alertmanager's ``msteamsv2`` send. Cards above ~28 KB get 413, so
the summary is trimmed; > 4 requests/s get 429 (handled by the shared retry-after stage)."""

from __future__ import annotations

from typing import Any

from fabricmon.alerts.transports import HttpTransport, Message


class Transport(HttpTransport):
    def payload(self, msg: Message) -> Any:
        card = {
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "type": "AdaptiveCard",
            "version": "1.2",
            "body": [
                {"type": "TextBlock", "text": msg.title, "weight": "Bolder", "size": "Medium", "wrap": True},
                {"type": "TextBlock", "text": msg.summary[:4000], "wrap": True},
                {"type": "FactSet", "facts": [{"title": k, "value": v} for k, v in msg.facts()]},
            ],
        }
        if msg.link:
            card["actions"] = [{"type": "Action.OpenUrl", "title": "Open episode", "url": msg.link}]
        return {
            "type": "message",
            "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "content": card}],
        }
