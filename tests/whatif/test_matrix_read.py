"""``jobs.matrix_read.cells`` reads every stored layout of ``matrix_blobs`` as the same cells that
``matrix_blobs.decode`` gives (dense at the stored width without a copy, sparse as pairs, "same as
sent" as None, the old raw int64 form), and refuses what ``decode`` refuses."""

from __future__ import annotations

import numpy as np
import pytest

from fabricmon.jobs import matrix_blobs
from fabricmon.jobs.matrix_read import cells


def _dense_of(c, n: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    if c.dense is not None:
        return c.dense.astype(np.int64)
    out = np.zeros(n * n, dtype=np.int64)
    out[c.index.astype(np.int64)] = c.values
    return out.reshape(n, n)


@pytest.mark.parametrize(("top", "fill"), [(200, 1.0), (60_000, 1.0), (3_000_000_000, 1.0), (9, 0.02), (1 << 40, 1.0)])
def test_every_layout_reads_as_decode_does(top: int, fill: float) -> None:
    rng = np.random.default_rng(top)
    n = 37
    m = rng.integers(0, top, (n, n)) * (rng.random((n, n)) < fill)
    blob = matrix_blobs.encode(m)
    c = cells(blob, n)
    assert c is not None and np.array_equal(_dense_of(c, n), matrix_blobs.decode(blob, n))
    if fill == 1.0 and top < 1 << 32:
        assert c.dense is not None and c.dense.dtype.itemsize < 8  # the stored width, not int64
    if fill < 1.0:
        assert c.dense is None and len(c.index) == np.count_nonzero(m)
    assert cells(matrix_blobs.encode(m, same_as=m), n) is None
    raw = m.astype("<i8").tobytes()  # written before the encoded layout
    assert np.array_equal(_dense_of(cells(raw, n), n), m)


@pytest.mark.parametrize("blob", [b"FMM1\x00\x04" + b"\x00" * 7, b"nope", b"FMM1\x07\x04", b"FMM1\x01\x04" + b"\x00" * 9,
                                  b"FMM1\x01\x01" + np.array([9999], "<u4").tobytes() + b"\x05"])
def test_malformed_blobs_are_refused_as_decode_refuses_them(blob: bytes) -> None:
    with pytest.raises(matrix_blobs.MatrixBlobError):
        matrix_blobs.decode(blob, 3)
    with pytest.raises(matrix_blobs.MatrixBlobError):
        cells(blob, 3)
