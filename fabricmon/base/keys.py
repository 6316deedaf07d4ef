"""Every Redis key fabricmon uses, built here and nowhere else.

One owner module per store reads and writes each key (named beside it); this module only spells
them, so a key's layout changes in one place and ``redis-cli --scan --pattern 'fm:*'`` shows
everything::

    fm:frames:{fabric}            stream  live window of frames        telemetry.live_window
    fm:health:{fabric}            hash    switch → JSON health         telemetry.live_window
    fm:lease:{shard}              string  holder token (SET NX PX)     telemetry.leases
    fm:standby:{shard}            string  standby token (SET NX PX)    telemetry.leases
    fm:enqueued:{shard}           string  "a collector is queued"      telemetry.services
    fm:placement:{shard}          string  "a better standby was asked" telemetry.services
    fm:tick:{fabric}:{tick_ns}    hash    switch → slice of a tick     telemetry.framing
    fm:latest:{fabric}            hash    switch → last good slice     telemetry.framing
    fm:framed:{fabric}:{tick_ns}  string  a tick was framed (NX)       telemetry.framing
    fm:read:{fabric}:{switch}     string  last counter read (handover) telemetry.shard_loop
    fm:hist:{fabric}:{start_ns}   string  history step written (NX)    telemetry.shard_loop
    fm:alerts:cursor:{fabric}     string  last frame evaluated         alerts.evaluation
    fm:alerts:state:{fabric}      string  moving-incast state (JSON)   alerts.evaluation
    fm:cabling:errors:{fabric}    string  switch → unreadable LLDP     alerts.cabling
    fm:counters                   hash    counter name → total         base.counters
    fabricmon:jobs:rate:{token}   hash    ingest token bucket          jobs.ratelimit
"""

from __future__ import annotations

PREFIX = "fm:"


def frames(fabric: str) -> str:
    return f"fm:frames:{fabric}"


FRAMES_PATTERN = frames("*")  # SCAN pattern of every fabric's live window


def fabric_of_frames(key: bytes | str) -> str:
    """The fabric whose live window ``key`` is (inverse of :func:`frames`)."""
    text = key.decode() if isinstance(key, bytes) else key
    return text[len(frames("")) :]


def health(fabric: str) -> str:
    return f"fm:health:{fabric}"


def lease(shard_id: str) -> str:
    return f"fm:lease:{shard_id}"


def standby(shard_id: str) -> str:
    return f"fm:standby:{shard_id}"


def handback(shard_id: str) -> str:
    """A list the holder pushes to when it releases the shard: its standby blocks on it."""
    return f"fm:handback:{shard_id}"


def enqueued(shard_id: str) -> str:
    return f"fm:enqueued:{shard_id}"


def placement(shard_id: str) -> str:
    """Set while beat waits before asking again for a standby in another worker than the holder's."""
    return f"fm:placement:{shard_id}"


def tick(fabric: str, tick_ns: int) -> str:
    return f"fm:tick:{fabric}:{tick_ns}"


def latest_slices(fabric: str) -> str:
    return f"fm:latest:{fabric}"


def framed(fabric: str, tick_ns: int) -> str:
    return f"fm:framed:{fabric}:{tick_ns}"


def switch_read(fabric: str, switch: str) -> str:
    return f"fm:read:{fabric}:{switch}"


def history_guard(fabric: str, start_ns: int) -> str:
    return f"fm:hist:{fabric}:{start_ns}"


def alerts_cursor(fabric: str) -> str:
    return f"fm:alerts:cursor:{fabric}"


def alerts_state(fabric: str) -> str:
    return f"fm:alerts:state:{fabric}"


def alerts_lock(fabric: str) -> str:
    return f"fm:alerts:lock:{fabric}"


def cabling_errors(fabric: str) -> str:
    return f"fm:cabling:errors:{fabric}"


COUNTERS = "fm:counters"  # totals every process adds to (the /metrics counters)


def rate_bucket(token: str) -> str:
    return f"fabricmon:jobs:rate:{token}"
