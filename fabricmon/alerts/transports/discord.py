"""Discord webhook: ``content`` ≤ 2000, one embed per alert (at most 10 embeds; title ≤ 256,
description ≤ 4096, all embeds together ≤ 6000 characters)
(https://discord.com/developers/docs/resources/webhook). 429 carries JSON ``retry_after``; 404 =
webhook deleted (permanent). Markdown in our text is escaped so port names stay literal."""

from __future__ import annotations

from typing import Any

from fabricmon.alerts.transports import CHAT_ALERTS, HttpTransport, Message, Notification

EMBEDS_MAX_CHARS = 6000
COLOR = {"firing": 0xD9534F, "resolved": 0x5CB85C}


def escape(text: str) -> str:
    for ch in ("\\", "*", "_", "~", "`", "|", ">"):
        text = text.replace(ch, "\\" + ch)
    return text


def _embed(a: Message, budget: int) -> dict[str, Any]:
    title = escape(f"[{a.status.upper()}] {a.kind.replace('_', ' ')} {a.key}")[:200]
    lines = [escape(a.summary), *(f"**{k}**: {escape(v)}" for k, v in a.facts())]
    return {"title": title, "description": "\n".join(lines)[: max(budget - len(title), 0)],
            "color": COLOR.get(a.status, 0x999999)}


class Transport(HttpTransport):
    def payload(self, msg: Notification) -> Any:
        shown = msg.alerts[:CHAT_ALERTS]
        budget = (EMBEDS_MAX_CHARS - 200) // max(len(shown), 1)
        more = len(msg.alerts) - len(shown) + msg.truncated
        content = escape(msg.title) + (f" (… and {more} more)" if more > 0 else "")
        return {"content": content[:2000], "embeds": [_embed(a, budget) for a in shown]}
