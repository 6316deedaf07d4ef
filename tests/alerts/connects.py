"""Every socket.connect in this process, as the interpreter sees it: proof of "no connection".

A module of its own, imported by package path (``tests.alerts.connects``), not from ``conftest``:
several test directories have a ``conftest``, and ``from conftest import …`` got whichever was
imported first (an ImportError when tests/alerts and tests/e2e ran in one xdist session)."""

from __future__ import annotations

import sys

CONNECTS: list[tuple[str, int]] = []


def _audit(event: str, args: tuple) -> None:
    if event == "socket.connect" and isinstance(args[1], tuple) and len(args[1]) >= 2:
        CONNECTS.append((str(args[1][0]), int(args[1][1])))


sys.addaudithook(_audit)
