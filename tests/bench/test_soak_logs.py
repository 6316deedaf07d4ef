"""The soak's log scan (bench/soak.py scan_logs) on hand-written logs: which tracebacks are the
soak's own injected faults (excused) and which count, however stale the line before them is."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from soak import scan_logs

T0 = time.mktime(time.strptime("2026-12-05 20:00:00", "%Y-%m-%d %H:%M:%S"))


def stamp(t: float) -> str:
    return time.strftime("[%Y-%m-%d %H:%M:%S,000: INFO/MainProcess]", time.localtime(t))


LIBRARY_TB = ["Traceback (most recent call last):",
              '  File "/x/site-packages/redis/connection.py", line 1, in connect',
              "redis.exceptions.ConnectionError: Error 111 connecting to 127.0.0.1:6390. Connection refused."]
OUR_TB = ["Traceback (most recent call last):",
          '  File "/work/main/fabricmon/alerts/evaluation.py", line 9, in run',
          "ValueError: bad frame"]


def scan(tmp_path: Path, lines: list[str], faults: list[tuple[float, float]]):  # type: ignore[no-untyped-def]
    (tmp_path / "beat.log").write_text("\n".join(lines) + "\n")
    return scan_logs(tmp_path, faults)


def test_a_library_traceback_in_an_outage_is_excused_though_the_line_before_is_minutes_old(tmp_path: Path) -> None:
    # beat said nothing for 5 min, then Redis went down at +300 s: the line after dates the traceback
    lines = [f"{stamp(T0)} beat: Starting...", *LIBRARY_TB, f"{stamp(T0 + 301)} beat: reconnecting"]
    got = scan(tmp_path, lines, [(T0 + 300, T0 + 305)])
    assert (got.tracebacks, got.excused) == (0, 1), got.samples


def test_a_library_traceback_outside_any_fault_counts(tmp_path: Path) -> None:
    lines = [f"{stamp(T0)} beat: Starting...", *LIBRARY_TB, f"{stamp(T0 + 100)} beat: reconnecting"]
    got = scan(tmp_path, lines, [(T0 + 300, T0 + 305)])
    assert (got.tracebacks, got.excused) == (1, 0)
    assert "ConnectionError" in got.samples[0]


def test_a_stale_line_before_does_not_excuse_a_traceback_long_after_the_fault(tmp_path: Path) -> None:
    # the fault was right after the line before, but the traceback came 10 min later
    lines = [f"{stamp(T0)} beat: Starting...", *LIBRARY_TB, f"{stamp(T0 + 600)} beat: reconnecting"]
    got = scan(tmp_path, lines, [(T0 + 1, T0 + 5)])
    assert (got.tracebacks, got.excused) == (1, 0)


def test_our_own_traceback_counts_even_during_a_fault(tmp_path: Path) -> None:
    lines = [f"{stamp(T0 + 300)} worker: polling", *OUR_TB, f"{stamp(T0 + 301)} worker: polling"]
    got = scan(tmp_path, lines, [(T0 + 299, T0 + 305)])
    assert (got.tracebacks, got.excused) == (1, 0)


def test_a_traceback_at_the_end_of_a_log_is_dated_by_the_line_before(tmp_path: Path) -> None:
    lines = [f"{stamp(T0 + 300)} worker: polling", *LIBRARY_TB]
    assert scan(tmp_path, lines, [(T0 + 299, T0 + 305)]).excused == 1
    assert scan(tmp_path, lines, [(T0 + 500, T0 + 505)]).tracebacks == 1
