"""Django's SQLite backend with owner-only files.

The database holds password hashes, API token digests and sealed secrets, so it must not be
world-readable (SQLite creates files 0644 under the usual umask). Before SQLite opens a file that
does not exist yet, it is created empty with mode 0600 (an empty file is a valid empty database),
so there is no moment at which it is readable by others; after each connect the database and any
``-wal``/``-shm``/``-journal`` beside it are set to 0600 (SQLite gives those the main file's mode
when it creates them, and files left by an older version are fixed here). In-memory databases and
files owned by someone else (a read-only mount) are left alone.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any

from django.db.backends.sqlite3 import base

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
    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        path = database_path(conn_params.get("database", ""))
        if path is not None and path.parent.is_dir():
            create_owner_only(path)
        conn = super().get_new_connection(conn_params)
        if path is not None:
            restrict(path)
        return conn
