"""Django's SQLite backend with owner-only files.

The database holds password hashes, API token digests and sealed secrets, so it must not be
world-readable (SQLite creates files 0644 under the usual umask). Before SQLite opens a file that
does not exist yet, it is created empty with mode 0600 (an empty file is a valid empty database),
so there is no moment at which it is readable by others; after each connect the database and any
``-wal``/``-shm``/``-journal`` beside it are set to 0600 (SQLite gives those the main file's mode
when it creates them, and files left by an older version are fixed here). In-memory databases and
files owned by someone else (a read-only mount) are left alone.

It also says who keeps SQLite's one write lock. Every write transaction is ``BEGIN IMMEDIATE``
(settings.SQLITE_OPTIONS), so from BEGIN to COMMIT/ROLLBACK the connection holds the lock and every
other writer of every process waits (up to the 20 s timeout, then "database is locked"). A
transaction that waited or held longer than ``FABRICMON_SQLITE_SLOW_WRITE_S`` is logged with the
code that ran it, and counted (``/metrics``: ``fabricmon_sqlite_slow_writes_total``): in the hour
soak, writers were locked out in minute-long episodes whose holder no log named.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import sys
import sysconfig
import time
import traceback
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.backends.sqlite3 import base

log = logging.getLogger(__name__)

OWNER_ONLY = 0o600
COMPANIONS = ("", "-wal", "-shm", "-journal")


def database_path(name: object) -> Path | None:
    """The file behind a Django SQLite NAME, or None for an in-memory or URI database."""
    text = str(name)
    if not text or text == ":memory:" or text.startswith("file:") or "mode=memory" in text:
        return None
    return Path(text)


def create_owner_only(path: Path) -> None:
    """Create ``path`` empty and 0600 unless it exists (O_EXCL: never truncate, never race)."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, OWNER_ONLY))


def restrict(path: Path) -> None:
    """Set the database and its companion files to 0600 where we own them and they are wider."""
    uid = os.getuid()
    for suffix in COMPANIONS:
        f = path.with_name(path.name + suffix)
        try:
            st = f.stat()
        except FileNotFoundError:
            continue
        if st.st_uid == uid and stat.S_IMODE(st.st_mode) & ~OWNER_ONLY:
            os.chmod(f, OWNER_ONLY)


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.write_lock = TimedWriteLock()

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        path = database_path(conn_params.get("database", ""))
        if path is not None and path.parent.is_dir():
            create_owner_only(path)
        conn = super().get_new_connection(conn_params)
        if path is not None:
            restrict(path)
        return conn

    def _start_transaction_under_autocommit(self) -> None:
        asked = time.monotonic()
        super()._start_transaction_under_autocommit()  # BEGIN IMMEDIATE: returns holding the lock
        self.write_lock.begun(asked)

    def _commit(self) -> None:
        try:
            super()._commit()
        finally:
            self.write_lock.ended()

    def _rollback(self) -> None:
        try:
            super()._rollback()
        finally:
            self.write_lock.ended()


_PATHS = sysconfig.get_paths()
_NOT_OURS = (_PATHS["stdlib"], _PATHS["purelib"], _PATHS["platlib"], str(Path(__file__).parent), "<frozen ")


def _where() -> str:
    """The innermost frames of the current stack outside the standard library, the installed
    packages (the ORM, Celery) and this module: ``jobs/ingest.py:201 store_columns <
    jobs/api.py:120 post_events`` — the code whose transaction it is."""
    ours = [f for f in traceback.extract_stack() if not f.filename.startswith(_NOT_OURS)]
    return " < ".join(f"{f.filename.rsplit('/fabricmon/', 1)[-1]}:{f.lineno} {f.name}"
                      for f in reversed(ours[-3:])) or " ".join(sys.argv[:2])


def _slow(kind: str, seconds: float) -> None:
    from fabricmon.base import counters  # noqa: PLC0415  (only on the rare slow path)

    log.warning("SQLite write lock %s %.1f s: %s", kind, seconds, _where())
    counters.add({f"sqlite_slow_writes:{kind}": 1})


class TimedWriteLock:
    """BEGIN IMMEDIATE … COMMIT/ROLLBACK timed on one connection (see the module docstring)."""

    def __init__(self) -> None:
        self.since: float | None = None

    def begun(self, asked: float) -> None:
        self.since = time.monotonic()
        waited = self.since - asked
        if waited > settings.FABRICMON_SQLITE_SLOW_WRITE_S:
            _slow("waited", waited)

    def ended(self) -> None:
        if self.since is None:
            return
        held, self.since = time.monotonic() - self.since, None
        if held > settings.FABRICMON_SQLITE_SLOW_WRITE_S:
            _slow("held", held)
