"""An event's per-peer bytes on the wire: the compact per-pg-rank lists (``send_bytes_per_pg_rank``:
entry i is the bytes to or from global rank ``pg_ranks[i]``) or the maps a server older than
them reads (``send_bytes_per_peer``: {global rank: bytes}). Events are built with lists; the
poster turns them into maps for a server that does not list them (``GET /jobs/api/clock``)."""

from __future__ import annotations

from typing import Any

from collectors.traces.schema import PEER_LISTS

LIST_KEYS = frozenset(k for k, _ in PEER_LISTS)


def has_lists(event: dict[str, Any]) -> bool:
    return not LIST_KEYS.isdisjoint(event)


def as_maps(event: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``event`` with its per-pg-rank lists as peer maps (ValueError when a list's
    length is not pg_ranks')."""
    out = dict(event)
    keys = [str(r) for r in event.get("pg_ranks") or ()]
    for list_key, map_key in PEER_LISTS:
        values = out.pop(list_key, None)
        if values is not None:
            out[map_key] = dict(zip(keys, values, strict=True))
    return out


def peer_bytes(event: dict[str, Any], direction: str) -> dict[str, int] | None:
    """The event's per-peer bytes of ``direction`` ("send" or "recv") as a map, whichever form
    it carries (for readers of recorded events)."""
    return as_maps(event).get(f"{direction}_bytes_per_peer")
