"""The soak in `make test`: `make soak`'s harness (bench/soak.py) for 8 minutes — the whole product
started as `make demo` starts it, two forced kills of the lease-holding worker, a 20 s Redis
restart, every nav page timed and loaded in Chromium — and its invariants must hold. Marked
``soak`` and run in its own pytest process after the others (scripts/test.sh): it needs the
machine to itself. The 60-minute run is `make soak`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.soak, pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]
MINUTES = 8


@pytest.mark.timeout(MINUTES * 60 + 900)
def test_eight_minutes_of_the_product_keep_every_promise(tmp_path: Path) -> None:
    out = tmp_path / "soak"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "soak.py"), "--minutes", str(MINUTES), "--out", str(out),
         "--servers", "16", "--gpus-per-server", "8", "--spines", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=MINUTES * 60 + 600, check=False,
    )
    text = done.stdout + done.stderr
    print(text[-6000:])
    (ROOT / "test-output").mkdir(exist_ok=True)
    (ROOT / "test-output" / "soak.txt").write_text(text)
    bench = re.search(r"^BENCH soak .*$", text, re.M)
    assert bench, text[-3000:]
    figures = dict(kv.split("=", 1) for kv in bench.group(0).split()[2:])
    # every invariant must hold; page times (a timing figure) and recall/precision (a rate that
    # needs the hour's dozens of migrations to mean anything) are `make soak`'s to judge
    problems = json.loads((out / "soak.json").read_text())["problems"]
    hourly = ("pages over", "moving-incast recall", "moving-incast precision")
    # … and the culprit-naming share (a share of a handful of alerts in 8 minutes)
    assert not [p for p in problems if not p.startswith(hourly) and "attributed incast alerts name" not in p], problems
    assert int(figures["lost_ticks"]) == 0 and int(figures["kills"]) >= 2
    assert float(figures["takeover_max_s"]) <= 2.0
    assert int(figures["false_alerts"]) == 0 and int(figures["http_5xx"]) == 0
    assert int(figures["tracebacks"]) == 0 and int(figures["console_errors"]) == 0
    # and detection works at all: most of the migrations the twin made are seen
    if int(figures["migrations"]) >= 3:
        assert float(figures["recall"]) >= 0.5, figures
