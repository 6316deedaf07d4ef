"""Schemathesis hooks for tests/jobs/api_fuzz.py: an NDJSON body is one generated object per line
(the schema describes one line: an event or a rank entry)."""

from __future__ import annotations

import json
from typing import Any

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx: Any, value: Any) -> bytes:
    lines = value if isinstance(value, list) else [value]
    return b"\n".join(json.dumps(v).encode() for v in lines)
