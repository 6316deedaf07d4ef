"""When the probe posts again after a failure: capped exponential backoff with full jitter, and the
server's own Retry-After when it gives one.

What is retried is what Prometheus remote-write retries (``storage/remote/queue_manager.go``):
a connection failure or timeout, any 5xx, and 429 (and 408, a server-side timeout). Any other 4xx
is the server saying the request itself is wrong: posting it again cannot help.

Full jitter (a uniform wait in ``[0, min(cap, base·2^n)]``, the AWS Architecture Blog's
"Exponential Backoff And Jitter") keeps the ranks of one job from hammering a restarted server in
lock-step; the cap (5 s, Prometheus's ``max_backoff``) bounds how long the data waits after the
server is back.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

RETRY_STATUSES = frozenset({408, 429})


def retryable(status: int) -> bool:
    """Whether an HTTP answer means "the same request may succeed later"."""
    return status >= 500 or status in RETRY_STATUSES


def refusal(status: int) -> bool:
    """The server refuses this probe itself (token, run): nothing it posts will ever be taken."""
    return status in (401, 403, 404)


@dataclass
class Backoff:
    """Delays before the next attempt of one failing request; ``reset()`` after a success."""

    base_s: float = 0.1
    cap_s: float = 5.0
    attempt: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def next_delay_s(self) -> float:
        ceiling = min(self.cap_s, self.base_s * 2.0 ** min(self.attempt, 30))
        self.attempt += 1
        return self.rng.uniform(0.0, ceiling)

    def reset(self) -> None:
        self.attempt = 0


def retry_after_s(headers: Mapping[str, str], body: Any, now_s: float | None = None) -> float | None:
    """The wait the server asked for: the ``Retry-After`` header (delta-seconds or an HTTP date,
    RFC 9110 §10.2.3), else the ingest API's ``retry_after_s`` body field; None if neither parses."""
    raw = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if raw is not None:
        text = raw.strip()
        if text.isascii() and text.isdigit():
            return float(text)
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            when = None
        if when is not None:
            return max(when.timestamp() - (time.time() if now_s is None else now_s), 0.0)
    if isinstance(body, dict):
        try:
            value = float(body.get("retry_after_s"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
        return value if value >= 0 else None
    return None
