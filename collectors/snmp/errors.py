"""The one error type of the SNMP collector and its per-process parse-error counts.

Kept apart from the poller so the pysnmp path and the fast v2c path (``v2c``/``ber``) raise
the same :class:`SnmpPollError` without importing each other.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

PollErrorKind = Literal["timeout", "auth", "malformed", "agent_error"]

# Per-process counts of dropped cells/rows and malformed polls, by reason (health and tests).
PARSE_ERRORS: Counter[str] = Counter()


class SnmpPollError(Exception):
    """A poll of one target failed; ``kind`` is one of timeout / auth / malformed / agent_error."""

    def __init__(self, kind: PollErrorKind, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind: PollErrorKind = kind
        self.message = message
