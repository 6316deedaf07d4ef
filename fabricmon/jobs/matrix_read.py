"""Bulk reads of stored traffic matrices for readers that fold many of them (the What-if page):
one query for a run's rows, and each blob decoded in its stored form — no int64 widening.

A live reader (the phase views) reads a window's rows *and the parts appended beside them*
(:func:`window`, :func:`sent_blobs`) and sums them itself, so reading never writes: folding the
parts in (``matrix_parts.settle``) on every refresh rewrote each 11 MB row of a 5,632-rank job
once a refresh while its events streamed in — up to 70 MB/s of writes from the pages' process in
the scale bench's block minute. Bytes are additive, so a row plus its parts is the settled row.

``matrix_blobs.decode`` gives a fresh n×n int64 array (what a writer merging counts needs). A reader
that only sums or folds the cells does better with what the blob already holds: a read-only view
of the dense cells at their stored width (uint8/16/32, no copy), or the (index, value) pairs of a
sparse blob — at 4,096 ranks a dense int64 decode writes 134 MB a matrix, the view none. The
layout is ``matrix_blobs``'s (this module only reads it: the encoder and its constants stay there).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fabricmon.jobs import matrix_blobs as mb
from fabricmon.jobs.models import MatrixPart, Run, TrafficMatrix

Key = tuple[int, int, str]  # (step, layer, phase)


@dataclass(frozen=True)
class StoredCells:
    """One stored n×n matrix without widening: ``dense`` (n, n) at its stored width, or the
    row-major flat ``index`` and ``values`` of its non-zero cells (``dense`` None)."""

    n: int
    dense: npt.NDArray[np.generic] | None
    index: npt.NDArray[np.generic] | None = None
    values: npt.NDArray[np.generic] | None = None


def cells(blob: bytes | memoryview, n: int) -> StoredCells | None:
    """The stored cells of a blob (None: "same as sent"); every malformed blob is the
    ``MatrixBlobError`` that ``matrix_blobs.decode`` raises for it."""
    raw = bytes(blob)
    if len(raw) == n * n * 8:  # the raw int64 form written before the encoded layout
        return StoredCells(n, np.frombuffer(raw, dtype="<i8").reshape(n, n))
    if len(raw) < mb._HEADER or raw[:4] != mb.MAGIC or raw[5] not in mb._UNSIGNED:
        raise mb.MatrixBlobError(f"traffic matrix blob of {len(raw)} bytes is not a {n}×{n} matrix")
    layout, width = raw[4], raw[5]
    dtype = mb._UNSIGNED[width]
    if layout == mb.SAME:
        return None
    if layout == mb.DENSE:
        body = len(raw) - mb._HEADER
        if body != n * n * width:
            raise mb.MatrixBlobError(f"dense matrix blob holds {body} bytes, not {n}×{n}×{width}")
        return StoredCells(n, np.frombuffer(raw, dtype=dtype, offset=mb._HEADER).reshape(n, n))
    if layout == mb.SPARSE:
        k, rest = divmod(len(raw) - mb._HEADER, 4 + width)
        if rest:
            size = k * (4 + width) + rest
            raise mb.MatrixBlobError(f"sparse matrix blob of {size} bytes is not whole cells")
        index = np.frombuffer(raw, dtype="<u4", count=k, offset=mb._HEADER)
        if k and int(index.max()) >= n * n:
            raise mb.MatrixBlobError(f"sparse matrix blob names cell {int(index.max())} of a {n}×{n} matrix")
        values = np.frombuffer(raw, dtype=dtype, count=k, offset=mb._HEADER + 4 * k)
        return StoredCells(n, None, index, values)
    raise mb.MatrixBlobError(f"unknown traffic matrix layout {layout}")


@dataclass(frozen=True)
class StoredMatrix:
    """A ``TrafficMatrix`` row as cells: ``received`` None when it is stored "same as sent"."""

    id: int
    step: int
    layer: int
    phase: str
    sent: StoredCells
    received: StoredCells | None


def read_cells(ids: Iterable[int], *, chunk: int = 8) -> Iterator[StoredMatrix]:
    """The rows ``ids`` in (step, layer, phase) order, one query fetched ``chunk`` rows at a time
    (memory follows the chunk, not the run), each decoded by :func:`cells`."""
    rows = (
        TrafficMatrix.objects.filter(pk__in=list(ids))
        .order_by("step", "layer", "phase", "id")
        .values_list("id", "step", "layer", "phase", "n_ranks", "sent", "received")
    )
    for mid, step, layer, phase, n, sent, received in rows.iterator(chunk_size=chunk):
        s = cells(sent, n)
        if s is None:
            raise mb.MatrixBlobError("a sent matrix stored as 'same as sent'")
        yield StoredMatrix(int(mid), int(step), int(layer), str(phase), s, cells(received, n))


@dataclass(frozen=True)
class KeyPieces:
    """What one (step, layer, phase) holds now: its newest stored row — (id, calls, n_ranks), the
    newest source's where a run has several — and the ids of the parts appended beside that row
    and not yet folded in, ascending. Equal pieces: equal bytes (a part is written once and only
    ever deleted, folded into its row, which changes the row's calls)."""

    row: tuple[int, int, int]
    parts: tuple[int, ...]


def window(run: Run, lo: int, hi: int, source: str | None) -> dict[Key, KeyPieces]:
    """Every key of steps [lo, hi] (layer ≥ 0) with its row and unfolded parts: two index-only
    queries, no blob read."""
    rows = TrafficMatrix.objects.filter(run=run, step__gte=lo, step__lte=hi, layer__gte=0)
    parts = MatrixPart.objects.filter(run=run, step__gte=lo, step__lte=hi, layer__gte=0)
    if source:
        rows, parts = rows.filter(source=source), parts.filter(source=source)
    newest: dict[Key, tuple[tuple[int, int, int], str]] = {}
    for mid, src, step, layer, phase, n_ranks, calls in rows.values_list(
        "id", "source", "step", "layer", "phase", "n_ranks", "calls"
    ).order_by("id"):
        newest[(int(step), int(layer), str(phase))] = ((int(mid), int(calls), int(n_ranks)), str(src))
    staged: dict[Key, list[int]] = {}
    part_keys = parts.values_list("id", "source", "step", "layer", "phase").order_by("id")
    for pid, src, step, layer, phase in part_keys:
        key = (int(step), int(layer), str(phase))
        if key in newest and newest[key][1] == src:  # (a part always has its row: see matrix_parts.add)
            staged.setdefault(key, []).append(int(pid))
    return {k: KeyPieces(row, tuple(staged.get(k, ()))) for k, (row, _) in newest.items()}


def sent_blobs(
    row_ids: Iterable[int], part_ids: Iterable[int], *, chunk: int = 8
) -> Iterator[tuple[int, int, bytes]]:
    """(id, n_ranks, sent blob) of the rows named, then of the parts named, fetched ``chunk`` at a
    time (memory follows the chunk). Callers that need to tell them apart ask for one kind a call."""
    for model, ids in ((TrafficMatrix, list(row_ids)), (MatrixPart, list(part_ids))):
        if ids:
            got = model.objects.filter(pk__in=ids).values_list("id", "n_ranks", "sent")
            for mid, n, sent in got.iterator(chunk_size=chunk):
                yield int(mid), int(n), sent
