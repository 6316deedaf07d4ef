"""Leases: a shard is polled by at most one collector at a time.

A lease is a Redis key ``fm:lease:{shard}`` holding a random token, set with ``SET NX PX``. The
holder renews it well before expiry with a compare-and-``PEXPIRE`` (Lua: only if the key still
holds *its* token) and deletes it with a compare-and-``DEL`` when it hands the shard back. A
worker that dies stops renewing; the key expires after at most ``ttl_s`` and the next
``ensure_collectors`` run hands the shard to another worker — the "within one lease" promise.

A holder that fails to renew (network blip longer than the TTL, Redis restart) must stop polling:
someone else may already hold the shard.
"""

from __future__ import annotations

import os
import secrets
import socket

import redis

from fabricmon.base import keys

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class Lease:
    """A held shard. Create with :meth:`acquire`; ``renew()`` and ``release()`` are idempotent."""

    def __init__(self, r: redis.Redis, shard_id: str, token: str, ttl_s: float) -> None:
        self.r = r
        self.shard_id = shard_id
        self.token = token
        self.ttl_s = ttl_s
        self.held = True

    @classmethod
    def acquire(cls, r: redis.Redis, shard_id: str, ttl_s: float) -> Lease | None:
        """Take the shard if nobody holds it; ``None`` if it is held."""
        # The token names the holder so `redis-cli GET fm:lease:…` tells an operator who has it.
        token = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"
        if r.set(keys.lease(shard_id), token, nx=True, px=_ms(ttl_s)):
            return cls(r, shard_id, token, ttl_s)
        return None

    def renew(self) -> bool:
        """Extend to a full TTL from now; False (and ``held`` cleared) if the lease was lost."""
        if self.held:
            self.held = bool(self.r.eval(_RENEW, 1, keys.lease(self.shard_id), self.token, _ms(self.ttl_s)))
        return self.held

    def release(self) -> None:
        if self.held:
            self.r.eval(_RELEASE, 1, keys.lease(self.shard_id), self.token)
            self.held = False


def holder(r: redis.Redis, shard_id: str) -> str | None:
    """Who holds the shard (the token), or None if it is free."""
    raw = r.get(keys.lease(shard_id))
    return raw.decode() if isinstance(raw, bytes) else raw


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
