"""The beat's alert tasks when SQLite stays busy past its timeout (ingest writing beside them, the
hour soak's 59 tracebacks): one warning line each, nothing raised — the rows stay due for the next beat."""

from __future__ import annotations

import logging

import pytest
from django.db import OperationalError

from fabricmon.alerts import delivery, grouping, retention, tasks
from fabricmon.jobs import retention as job_retention
from fabricmon.jobs import tasks as job_tasks


def _busy(*_args: object) -> None:
    raise OperationalError("database is locked")


@pytest.mark.parametrize(("task", "target", "name", "args", "answer"), [
    (tasks.deliver_due, delivery, "deliver_due", (), 0),
    (tasks.deliver, delivery, "deliver", (7,), "busy"),
    (tasks.flush_groups, grouping, "flush_due", (), 0),
    (tasks.prune_history, retention, "prune_history", (), "busy"),
    (job_tasks.prune_storage, job_retention, "prune", (), "busy"),
])
def test_a_busy_database_is_one_warning_not_a_traceback(task, target, name, args, answer, monkeypatch,
                                                        caplog) -> None:
    monkeypatch.setattr(target, name, _busy)
    logger = task.__module__
    with caplog.at_level(logging.WARNING, logger=logger):
        assert task.run(*args) == answer
    said = [r for r in caplog.records if r.name == logger]
    assert len(said) == 1 and "database is locked" in said[0].getMessage() and said[0].exc_info is None
