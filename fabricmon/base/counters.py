"""Totals shared by every process (ingest and the like), in one Redis hash — their one owner.

``/metrics`` must show the same number whichever web process a scrape lands on, so counters are
not kept in process memory (``prometheus_client.Counter``) but added to ``fm:counters`` with
``HINCRBY``, one round trip per batch, and read back at scrape time. A Redis restart resets them
to zero, which Prometheus' ``rate()`` and ``increase()`` treat as the counter reset it is.

Counting never fails the work it counts: a Redis error is logged and the batch stands.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

import redis

from fabricmon.base import keys
from fabricmon.base.connections import connect

log = logging.getLogger(__name__)
_CLIENT: redis.Redis | None = None
_LOCK = threading.Lock()


def _client() -> redis.Redis:
    """One client per process (redis-py clients are thread-safe and pool their connections)."""
    global _CLIENT  # noqa: PLW0603  (a per-process connection pool, made on first use)
    with _LOCK:
        if _CLIENT is None:
            # Short timeouts: an unreachable Redis costs a batch a second, not a hung request.
            _CLIENT = connect(socket_connect_timeout=1.0, socket_timeout=1.0)
        return _CLIENT


def add(amounts: Mapping[str, int], r: redis.Redis | None = None) -> None:
    """Add each amount to its counter (zero amounts are skipped)."""
    todo = {name: int(n) for name, n in amounts.items() if n}
    if not todo:
        return
    try:
        pipe = (r or _client()).pipeline(transaction=False)
        for name, n in todo.items():
            pipe.hincrby(keys.COUNTERS, name, n)
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("counters: could not add %s: %s", todo, exc)


def read_all(r: redis.Redis) -> dict[str, int]:
    """Every counter's total."""
    return {k.decode(): int(v) for k, v in r.hgetall(keys.COUNTERS).items()}
