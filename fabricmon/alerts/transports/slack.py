"""Slack incoming webhook with Block Kit (https://api.slack.com/messaging/webhooks): a header, then
per alert (the first ``CHAT_ALERTS``) its summary and its facts; a message has at most 50 blocks,
a section 3,000 characters and 10 fields.

Quirks: 404 = the hook was deleted, 400 ``invalid_token`` / 403 = the app or user is gone — all
permanent (https://api.slack.com/changelog/2016-05-17-changes-to-errors-for-incoming-webhooks).
"""

from __future__ import annotations

from typing import Any

from fabricmon.alerts.netguard import Response
from fabricmon.alerts.transports import CHAT_ALERTS, HttpTransport, Notification, TransportError


def slack_text(msg: Notification) -> str:
    return f"*{msg.title}*\n{msg.summary}"


class Transport(HttpTransport):
    def payload(self, msg: Notification) -> Any:
        blocks: list[dict[str, Any]] = [
            {"type": "header", "text": {"type": "plain_text", "text": msg.title[:150]}},
        ]
        for a in msg.alerts[:CHAT_ALERTS]:
            mark = "✅ " if a.status == "resolved" else ""
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": (mark + a.summary)[:2900]}})
            fields = [{"type": "mrkdwn", "text": f"*{k}*\n{v}"[:1900]} for k, v in a.facts()]
            blocks.append({"type": "section", "fields": fields[:10]})
        context = []
        more = len(msg.alerts) - CHAT_ALERTS + msg.truncated
        if more > 0:
            context.append({"type": "mrkdwn", "text": f"… and {more} more"})
        link = next((a.link for a in msg.alerts if a.link), "")
        if link:
            context.append({"type": "mrkdwn", "text": f"<{link}|Open episode>"})
        if context:
            blocks.append({"type": "context", "elements": context})
        return {"text": slack_text(msg), "blocks": blocks}

    def raise_for_response(self, resp: Response) -> None:
        text = resp.body[:200].decode(errors="replace")
        if resp.status in (400, 403) and (
            "invalid_token" in text or "no_service" in text or resp.status == 403
        ):
            raise TransportError(f"{self.target.name}: Slack says {text!r}", permanent=True)
        super().raise_for_response(resp)
