"""The poll journal: one line per poll, per process file; a torn last line (kill -9) is skipped."""

from __future__ import annotations

import os
from pathlib import Path

from fabricmon.core.telemetry.slices import SwitchSlice
from fabricmon.telemetry import poll_journal
from fabricmon.telemetry.shard_loop import PollRecord


def _record(switch: str, tick: int) -> PollRecord:
    empty = SwitchSlice(switch, None, tick, {}, {})
    return PollRecord("fab", switch, tick, tick, tick + 1, tick + 2, empty, None)


def test_each_poll_is_one_line_and_a_torn_last_line_is_skipped(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FABRICMON_WORKER_ID", "host-1234abcd")
    journal = poll_journal.PollJournal(tmp_path / "polls", "fab:0", "host:1:abc:host-1234abcd")
    journal(_record("leaf-r0", 1_000))
    journal(_record("leaf-r1", 1_000))
    journal.close()
    (file,) = (tmp_path / "polls").glob("polls-*.ndjson")
    assert file.name.endswith(f"-{os.getpid()}.ndjson")
    with file.open("ab") as f:
        f.write(b'{"host": "h", "switch": "leaf-r')  # what a process killed mid-write leaves
    lines = list(poll_journal.read(tmp_path / "polls"))
    assert [(x["switch"], x["scheduled"], x["started"], x["finished"], x["ok"]) for x in lines] == [
        ("leaf-r0", 1_000, 1_001, 1_002, True), ("leaf-r1", 1_000, 1_001, 1_002, True)]
    assert {(x["pid"], x["worker"], x["shard"], x["lease"]) for x in lines} == {
        (os.getpid(), "host-1234abcd", "fab:0", "host:1:abc:host-1234abcd")}
