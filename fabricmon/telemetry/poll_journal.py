"""The poll journal: one NDJSON line per poll a collector process makes, when asked for.

Off unless ``FABRICMON_POLL_JOURNAL_DIR`` names a directory. Then every collector process appends
to its own file there (``polls-{host}-{pid}.ndjson``: no two writers share a file, so no locks)
one line per scheduled poll — who polled (host, pid, worker, lease token), which switch, which
tick, when the poll started and finished, whether it got data::

    {"host": "w1", "pid": 4121, "worker": "w1-3fa2…", "shard": "su1:0", "lease": "w1:4121:…",
     "switch": "leaf-r0", "tick": 1764633600000000000, "scheduled": …, "started": …,
     "finished": …, "ok": true}

It is how one tells, after the fact and across machines, whether a switch was ever polled by two
holders at once or a tick twice (tests/telemetry/test_multi_worker.py reads it after a ``kill -9``
of a whole worker). Each line is written with one ``write`` on an unbuffered file, so a process
killed mid-run leaves every poll it finished and at most one partial last line, which readers skip.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from fabricmon.telemetry.shard_loop import PollRecord


class PollJournal:
    """This process's journal file, for one lease: call it as ``run_shard``'s observer; close it
    when the lease ends."""

    def __init__(self, directory: str | Path, shard_id: str, lease_token: str) -> None:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.worker = os.environ.get("FABRICMON_WORKER_ID", "")
        self.shard_id, self.lease_token = shard_id, lease_token
        self._out = (path / f"polls-{self.host}-{self.pid}.ndjson").open("ab", buffering=0)

    def __call__(self, rec: PollRecord) -> None:
        line = {"host": self.host, "pid": self.pid, "worker": self.worker, "shard": self.shard_id,
                "lease": self.lease_token, "switch": rec.switch, "tick": rec.frame_tick_ns,
                "scheduled": rec.scheduled_ns, "started": rec.started_ns, "finished": rec.finished_ns,
                "ok": rec.error_kind is None}
        self._out.write((json.dumps(line) + "\n").encode())

    def close(self) -> None:
        self._out.close()


def read(directory: str | Path) -> Iterator[dict[str, object]]:
    """Every whole line of every collector's file in ``directory`` (a killed writer's torn last
    line is skipped)."""
    for file in sorted(Path(directory).glob("polls-*.ndjson")):
        for raw in file.read_bytes().splitlines():
            try:
                yield json.loads(raw)
            except ValueError:
                continue
