"""A short schemathesis run (a few hundred generated cases, every check) against the real server
with a valid token on every ingest and run endpoint: no 5xx, no schema-valid request rejected, no
schema-invalid one accepted, every response as the schema says. The ≥ 10,000-case run is
``tests/jobs/api_fuzz.py --examples 600`` (README, development). On main before issue 13's
fixes this found 11 failures in its first 1,841 cases."""

from __future__ import annotations

import pytest
from api_fuzz import fuzz_stack, run_fuzz

pytestmark = pytest.mark.integration


def test_schemathesis_finds_nothing(redis_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    srv, run, upload, token = fuzz_stack(tmp_path, redis_url)
    try:
        result = run_fuzz(srv.url, token, run, upload, examples=4, workdir=tmp_path, timeout_s=600)
    finally:
        srv.stop()
    assert result.returncode == 0, result.output[-8000:]
    assert result.cases >= 200, (result.cases, result.output[-2000:])
