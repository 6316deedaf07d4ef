"""The probe's optional file spool: every event the poster keeps is also appended to a local NDJSON
journal, so events survive the training process dying and are posted by the next poster started
on the same directory (``EventPoster(spool_dir=…)``).

::

    spool_dir/  lock            flock'ed by the one poster using the directory
                seg-000007.ndjson  append-only, one encoded event per line, rotated at 8 MiB
                seg-000008.ndjson  ← current
    a segment is deleted once every line in it was answered by the server or dropped (counted)

* **Durability (fsync policy).** A line is written to the OS when the event is submitted: a killed
  process (SIGKILL, the OOM killer) loses nothing written. The poster thread fsyncs the current
  segment at most once a second, and close() once more: a machine crash loses at most about the last
  second. (Fluent Bit's ``storage.sync normal`` and Prometheus's WAL make the same trade: no fsync
  per record.)
* **Replay.** A new poster reads every segment left behind (oldest first) before anything new; what
  its memory spool cannot hold is dropped and counted like any overflow. Replaying an event the
  server already stored costs nothing: ids are idempotent (the answer counts it a duplicate).
* **Bounded.** Lines leave the journal as they leave the memory spool (answered or dropped), and the
  memory spool's order is the journal's, so the journal stays within about the memory bound plus a
  segment.

No Django, stdlib only; not thread-safe: the poster holds its lock around every call but ``sync``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from pathlib import Path

SEGMENT_BYTES = 8 << 20
_SEGMENT = re.compile(r"seg-(\d{6,})\.ndjson")


class Journal:
    """Append-only NDJSON segments in one directory; see the module doc."""

    def __init__(self, directory: str | os.PathLike[str], segment_bytes: int = SEGMENT_BYTES) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._lock)
            raise ValueError(f"probe spool directory {self.dir} is in use by another poster") from exc
        self.segment_bytes = segment_bytes
        self.outstanding: dict[int, int] = {}  # segment → its lines not yet answered or dropped
        self.replayed: list[tuple[bytes, int]] = []  # (line, segment) left by an earlier poster
        old = sorted(int(m.group(1)) for p in self.dir.iterdir() if (m := _SEGMENT.fullmatch(p.name)))
        for seg in old:
            lines = [ln for ln in self._path(seg).read_bytes().split(b"\n") if ln.strip()]
            if not lines:
                self._path(seg).unlink(missing_ok=True)
                continue
            self.outstanding[seg] = len(lines)
            self.replayed.extend((ln, seg) for ln in lines)
        self.current = (old[-1] + 1) if old else 0
        self._fd = self._open(self.current)
        self._size = 0
        self._dirty = False
        self.closed = False

    def _path(self, seg: int) -> Path:
        return self.dir / f"seg-{seg:06d}.ndjson"

    def _open(self, seg: int) -> int:
        self.outstanding.setdefault(seg, 0)
        return os.open(self._path(seg), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def append(self, line: bytes) -> int:
        """Write one line; the segment it went to (to ``release`` it later)."""
        if self._size + len(line) + 1 > self.segment_bytes and self._size:
            os.close(self._fd)
            done = self.current
            self.current += 1
            self._fd, self._size = self._open(self.current), 0
            self._drop_if_done(done)
        os.write(self._fd, line + b"\n")
        self._size += len(line) + 1
        self.outstanding[self.current] += 1
        self._dirty = True
        return self.current

    def release(self, segments: list[int]) -> None:
        """These lines were answered or dropped: a segment with none left (not the current) goes.
        After close (a request answered late): nothing — the next poster replays them, as duplicates."""
        if self.closed:
            return
        for seg in segments:
            if seg in self.outstanding:
                self.outstanding[seg] -= 1
                self._drop_if_done(seg)

    def _drop_if_done(self, seg: int) -> None:
        if seg != self.current and self.outstanding.get(seg) == 0:
            del self.outstanding[seg]
            with contextlib.suppress(OSError):  # called from submit, which never raises: worst
                self._path(seg).unlink(missing_ok=True)  # case the next poster replays duplicates

    def sync_fd(self) -> int | None:
        """A duplicate of the current segment's descriptor to fsync outside the poster's lock (None
        when nothing was written since the last sync); the caller closes it."""
        if not self._dirty:
            return None
        self._dirty = False
        return os.dup(self._fd)

    def close(self) -> int:
        """fsync and close; every segment without outstanding lines is deleted. Returns how many
        lines stay for the next poster."""
        self.closed = True
        os.fsync(self._fd)
        os.close(self._fd)
        left = 0
        for seg, n in list(self.outstanding.items()):
            if n == 0:
                self._path(seg).unlink(missing_ok=True)
            left += n
        os.close(self._lock)  # releases the flock
        return left
