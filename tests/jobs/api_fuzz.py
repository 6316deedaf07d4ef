"""Schemathesis against the real server (Daphne with the body guard, own SQLite, real Redis) with a
valid token on every ingest and run endpoint: every check (no 5xx; schema-valid requests accepted,
schema-invalid ones rejected; responses as the schema says), and how many cases it generated.

    .venv/bin/python tests/jobs/api_fuzz.py --examples 600   # ≥ 10,000 cases (10,916 in 29 min)

tests/jobs/test_api_fuzz.py runs a few hundred cases of it in ``make test``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
ROOT = HERE.parents[1]
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")

SETUP = """
from django.contrib.auth import get_user_model
from fabricmon.jobs.models import TraceUpload
from fabricmon.jobs.runs import create_run
from fabricmon.jobs.tokens import issue_token
user = get_user_model().objects.create_user("fuzz")
run = create_run(user, "fuzz", world_size=16)
upload = TraceUpload.objects.create(run=run, kind="kineto", filename="t.json")
print(repr((run.pk, upload.pk, issue_token(user, "fuzz")[1])))
"""

CONFIG = """
[generation]
max-examples = {examples}
allow-x00 = true

[parameters]
"path.run_id" = {run}
"path.upload_id" = {upload}

[checks.positive_data_acceptance]
# an event batch or rank map whose every field has its schema type can still break a rule across
# fields (end_ns < start_ns, bytes_sent ≠ the sum of its peers): answered 422 with the line
# named, the other lines stored — the request itself was taken
expected-statuses = ["2XX", "422"]
"""


@dataclass
class FuzzResult:
    returncode: int
    cases: int
    output: str


def run_fuzz(url: str, token: str, run: int, upload: int, examples: int, workdir: Path,
             seed: int = 13, timeout_s: float = 3000) -> FuzzResult:
    config = workdir / "schemathesis.toml"
    config.write_text(CONFIG.format(examples=examples, run=run, upload=upload))
    report = workdir / "events.ndjson"
    cmd = [
        str(SCHEMATHESIS), "--config-file", str(config), "run", f"{url}/jobs/api/openapi.json",
        "--url", url, "-H", f"Authorization: Bearer {token}", "--checks", "all",
        "--exclude-checks", "ignored_auth",  # the token is valid on purpose; 401s are tested in test_ingest_api
        "--workers", "1", "--seed", str(seed), "--no-color", "--request-timeout", "60",
        "--report", "ndjson", "--report-ndjson-path", str(report),
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "fuzz_hooks", "PYTHONPATH": str(HERE)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=workdir, env=env,
                          check=False)
    return FuzzResult(done.returncode, _count_cases(report), done.stdout + done.stderr)


def _count_cases(report: Path) -> int:
    """Test cases sent, from the run's NDJSON event report."""
    cases = 0
    if not report.exists():
        return 0
    for line in report.read_text().splitlines():
        event = json.loads(line)
        for value in event.values():
            if isinstance(value, dict) and "recorder" in value:
                cases += len(value["recorder"].get("cases", {}))
    return cases


def fuzz_stack(tmp: Path, redis_url: str):  # type: ignore[no-untyped-def]
    """A fresh server with a user, token, run and upload; rate limit off (the fuzzer's pace)."""
    from asgi_server import live_server

    srv = live_server(tmp, redis_url, FABRICMON_INGEST_RATE_PER_S="0")
    run, upload, token = ast.literal_eval(srv.manage("shell", "-c", SETUP).strip().splitlines()[-1])
    return srv, run, upload, token


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=600, help="max examples per operation and phase")
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="api-fuzz-"))
    srv, run, upload, token = fuzz_stack(tmp, os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    try:
        result = run_fuzz(srv.url, token, run, upload, args.examples, tmp, args.seed, timeout_s=6 * 3600)
    finally:
        srv.stop()
    (tmp / "schemathesis.txt").write_text(result.output)
    print(result.output[-6000:])
    print(f"cases={result.cases} exit={result.returncode} (server log: {tmp / 'daphne.log'})")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
