"""Microsoft Teams via Workflows: a message with one Adaptive Card 1.2 — the title, then per alert
(the first ``CHAT_ALERTS``) its summary and a FactSet — as healthchecks' ``msteamsw`` and
Alertmanager's ``msteamsv2`` send. Cards above ~28 KB get 413, so summaries are trimmed; > 4
requests/s get 429 (handled by the shared retry-after stage)."""

from __future__ import annotations

from typing import Any

from fabricmon.alerts.transports import CHAT_ALERTS, HttpTransport, Notification


class Transport(HttpTransport):
    def payload(self, msg: Notification) -> Any:
        body: list[dict[str, Any]] = [
            {"type": "TextBlock", "text": msg.title, "weight": "Bolder", "size": "Medium", "wrap": True},
        ]
        for a in msg.alerts[:CHAT_ALERTS]:
            mark = "✅ " if a.status == "resolved" else ""
            body.append({"type": "TextBlock", "text": (mark + a.summary)[:1500], "wrap": True})
            body.append({"type": "FactSet", "facts": [{"title": k, "value": v[:500]} for k, v in a.facts()]})
        more = len(msg.alerts) - CHAT_ALERTS + msg.truncated
        if more > 0:
            body.append({"type": "TextBlock", "text": f"… and {more} more", "wrap": True})
        card: dict[str, Any] = {
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "type": "AdaptiveCard",
            "version": "1.2",
            "body": body,
        }
        link = next((a.link for a in msg.alerts if a.link), "")
        if link:
            card["actions"] = [{"type": "Action.OpenUrl", "title": "Open episode", "url": link}]
        return {
            "type": "message",
            "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "content": card}],
        }
