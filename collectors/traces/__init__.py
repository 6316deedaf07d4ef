"""Importers of job-side collective traces into normalized phase events (``schema``).

Each reader takes a binary stream and yields event dicts; memory stays bounded by the number of
collectives, never by the file size. Readers raise ``TraceFormatError`` naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any


class TraceFormatError(ValueError):
    """The file is not a readable trace of the kind asked for (the message says why)."""


def read_events(kind: str, stream: IO[bytes], *, rank: int | None = None) -> Iterator[dict[str, Any]]:
    """Dispatch to the reader for ``kind`` (kineto | fr | fr_pickle | inspector)."""
    if kind == "kineto":
        from collectors.traces.kineto import read_kineto  # noqa: PLC0415

        return read_kineto(stream, rank=rank)
    if kind in ("fr", "fr_pickle"):
        from collectors.traces.flight_recorder import read_flight_recorder  # noqa: PLC0415

        return read_flight_recorder(stream, rank=rank, pickled=(kind == "fr_pickle"))
    if kind == "inspector":
        from collectors.traces.inspector import read_inspector  # noqa: PLC0415

        return read_inspector(stream)
    raise TraceFormatError(f"unknown trace kind {kind!r}")
