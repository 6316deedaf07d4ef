"""Beat tasks beside ingest: when the database stays busy past SQLite's timeout ("database is
locked"), the task says so in one warning line and answers ``answer``, instead of a traceback.
Their work is rows that stay in the database (due notifications, groups to flush, history to
prune), so the next beat or pass does it."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.db import OperationalError

P = ParamSpec("P")
R = TypeVar("R")


def when_busy(answer: R, said: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """``said`` is the warning (``str.format``-ed with the task's positional arguments); it is
    logged by the task's own module's logger, followed by the database's message."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        log = logging.getLogger(fn.__module__)

        @functools.wraps(fn)
        def task(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except OperationalError as exc:
                log.warning("%s (%s)", said.format(*args), exc)
                return answer

        return task

    return wrap
