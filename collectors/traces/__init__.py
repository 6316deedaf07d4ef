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

__all__ = ["TraceFormatError", "read_events"]


def read_events(kind: str, stream: IO[bytes], *, rank: int | None = None) -> Iterator[dict[str, Any]]:
    """Dispatch to the reader for ``kind`` (kineto | fr | fr_pickle | inspector)."""
    if kind == "kineto":
        return read_kineto(stream, rank=rank)
    if kind in ("fr", "fr_pickle"):
        return read_flight_recorder(stream, rank=rank, pickled=(kind == "fr_pickle"))
    if kind == "inspector":
        return read_inspector(stream)
    raise TraceFormatError(f"unknown trace kind {kind!r}")
