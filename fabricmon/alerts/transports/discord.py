"""Discord webhook: ``content`` ≤ 2000, one embed (title ≤ 256, description ≤ 4096)
(https://discord.com/developers/docs/resources/webhook). 429 carries JSON ``retry_after``; 404 =
webhook deleted (permanent). Markdown in our text is escaped so port names stay literal."""

from __future__ import annotations

from typing import Any

from fabricmon.alerts.transports import HttpTransport, Message


def escape(text: str) -> str:
    for ch in ("\\", "*", "_", "~", "`", "|", ">"):
        text = text.replace(ch, "\\" + ch)
    return text


class Transport(HttpTransport):
    def payload(self, msg: Message) -> Any:
        color = {"firing": 0xD9534F, "resolved": 0x5CB85C}.get(msg.status, 0x999999)
        return {
            "content": escape(msg.title)[:2000],
            "embeds": [
                {
                    "title": escape(msg.title)[:256],
                    "description": escape(msg.summary)[:4096],
                    "color": color,
                    "fields": [
                        {"name": k, "value": escape(v)[:1024], "inline": True} for k, v in msg.facts()
                    ][:25],
                }
            ],
        }
