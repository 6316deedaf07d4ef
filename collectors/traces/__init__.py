"""Importers of job-side collective traces into normalized phase events (``schema``).

Each reader takes a binary stream and yields event dicts; memory stays bounded by the number of
collectives, never by the file size. Readers raise ``TraceFormatError`` naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

from collectors.traces.errors import TraceFormatError
from collectors.traces.flight_recorder import read_flight_recorder
from collectors.traces.inspector import read_inspector
from collectors.traces.kineto import read_kineto
from collectors.traces.report import ImportReport

__all__ = ["ImportReport", "TraceFormatError", "read_events"]


def read_events(
    kind: str,
    stream: IO[bytes],
    *,
    rank: int | None = None,
    name: str = "",
    report: ImportReport | None = None,
) -> Iterator[dict[str, Any]]:
    """Dispatch to the reader for ``kind`` (kineto | fr | fr_pickle | inspector). ``name`` is the
    file's path (it may say the rank); ``report`` is filled with what was recognised."""
    report = report if report is not None else ImportReport(kind=kind)
    report.kind = report.kind or kind
    if kind == "kineto":
        return read_kineto(stream, rank=rank, name=name, report=report)
    if kind in ("fr", "fr_pickle"):
        return read_flight_recorder(
            stream, rank=rank, pickled=(kind == "fr_pickle"), name=name, report=report
        )
    if kind == "inspector":
        return read_inspector(stream, report=report)
    raise TraceFormatError(f"unknown trace kind {kind!r}")
