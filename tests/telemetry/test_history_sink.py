"""The collector's history sink: a busy database is tried again and, if it stays busy, said in one
warning line — not a traceback, and never an exception into the collector's executor thread."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from django.db import OperationalError

from fabricmon.telemetry import services


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    monkeypatch.setattr(services, "HISTORY_RETRY_PAUSES_S", (0.0, 0.0, 0.0))
    return []


def _write_failing(calls: list[int], times: int, exc: Exception):
    def write(*_a: object, **_kw: object) -> int:
        calls.append(1)
        if len(calls) <= times:
            raise exc
        return 1

    return write


FRAMER = SimpleNamespace(fabric="f", max_frames=600)


def test_a_busy_database_is_tried_again_until_the_row_is_written(calls, monkeypatch, caplog) -> None:
    monkeypatch.setattr(services, "write_history", _write_failing(calls, 2, OperationalError("database is locked")))
    with caplog.at_level(logging.WARNING, logger=services.log.name):
        services._history_sink(None)(FRAMER, 0, 60)  # type: ignore[arg-type]
    assert len(calls) == 3 and caplog.records == []


def test_a_database_busy_past_every_try_is_one_warning_without_a_traceback(calls, monkeypatch, caplog) -> None:
    monkeypatch.setattr(services, "write_history", _write_failing(calls, 99, OperationalError("database is locked")))
    with caplog.at_level(logging.WARNING, logger=services.log.name):
        services._history_sink(None)(FRAMER, 0, 60)  # type: ignore[arg-type]
    assert len(calls) == len(services.HISTORY_RETRY_PAUSES_S) + 1
    [rec] = caplog.records
    assert rec.levelno == logging.WARNING and rec.exc_info is None and "database is locked" in rec.getMessage()


def test_a_bug_is_logged_with_its_traceback_once_and_not_retried(calls, monkeypatch, caplog) -> None:
    monkeypatch.setattr(services, "write_history", _write_failing(calls, 99, KeyError("x")))
    with caplog.at_level(logging.WARNING, logger=services.log.name):
        services._history_sink(None)(FRAMER, 0, 60)  # type: ignore[arg-type]
    assert len(calls) == 1
    [rec] = caplog.records
    assert rec.levelno == logging.ERROR and rec.exc_info is not None
