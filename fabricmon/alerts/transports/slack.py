"""Slack incoming webhook with Block Kit (https://api.slack.com/messaging/webhooks).

Quirks: 404 = the hook was deleted, 400 ``invalid_token`` / 403 = the app or user is gone — all
permanent (https://api.slack.com/changelog/2016-05-17-changes-to-errors-for-incoming-webhooks).
"""

from __future__ import annotations

from typing import Any

from fabricmon.alerts.netguard import Response
from fabricmon.alerts.transports import HttpTransport, Message, TransportError


def slack_text(msg: Message) -> str:
    return f"*{msg.title}*\n{msg.summary}"


class Transport(HttpTransport):
    def payload(self, msg: Message) -> Any:
        fields = [{"type": "mrkdwn", "text": f"*{k}*\n{v}"} for k, v in msg.facts()]
        blocks: list[dict[str, Any]] = [
            {"type": "header", "text": {"type": "plain_text", "text": msg.title[:150]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": msg.summary[:2900]}},
            {"type": "section", "fields": fields[:10]},
        ]
        if msg.link:
            blocks.append(
                {"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{msg.link}|Open episode>"}]}
            )
        return {"text": slack_text(msg), "blocks": blocks}

    def raise_for_response(self, resp: Response) -> None:
        text = resp.body[:200].decode(errors="replace")
        if resp.status in (400, 403) and (
            "invalid_token" in text or "no_service" in text or resp.status == 403
        ):
            raise TransportError(f"{self.target.name}: Slack says {text!r}", permanent=True)
        super().raise_for_response(resp)
