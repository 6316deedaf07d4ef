"""How a traffic matrix (rank×rank bytes, int64) is stored: small, and cheap to write.

A dense 256-rank matrix is 512 KB as int64, and a run stores two (sent, received) per (step,
layer, phase): about 1 GB in a 20-minute demo. Three facts make most of that unnecessary:

* per-pair bytes of one phase almost always fit 32 bits (or 16, 8): cells are stored in the
  narrowest unsigned width that holds the largest (int64 when any cell is negative or wider);
* a consistent job's received matrix equals its sent matrix: stored as a 6-byte "same as sent";
* a batch touching few pairs of many ranks (a job's first batch, a hostile ``rank=3000``) gives a
  mostly-zero matrix: stored as (flat index, value) pairs when that is smaller, so what is written
  follows the bytes sent, not rank².

Blob layout: ``b"FMM1"``, one layout byte (0 dense, 1 sparse, 2 same as sent), one width byte
(1, 2, 4 or 8), then the cells (dense: n·n values; sparse: k uint32 indices, then k values), all
little-endian. Rows written before this layout are raw n·n int64 (their length is exactly
n·n·8, which ``encode`` never gives an encoded blob), and are read as they are. Compression
(zlib of byte-shuffled cells) would save another third but costs 4 ms a matrix on the ingest
path; the widths cost 0.1 ms.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

MAGIC = b"FMM1"
DENSE, SPARSE, SAME = 0, 1, 2
_HEADER = len(MAGIC) + 2
_UNSIGNED = {1: "<u1", 2: "<u2", 4: "<u4", 8: "<i8"}
SAME_AS_SENT = MAGIC + bytes([SAME, 8])

Matrix = npt.NDArray[np.int64]


class MatrixBlobError(ValueError):
    """A stored blob that is neither the old raw form nor this layout (names what is wrong)."""


def _width(a: Matrix) -> int:
    if not a.size:
        return 1
    lo, hi = int(a.min()), int(a.max())
    if lo < 0 or hi >= 1 << 32:
        return 8
    return 1 if hi < 1 << 8 else 2 if hi < 1 << 16 else 4


def encode(a: npt.ArrayLike, *, same_as: npt.ArrayLike | None = None) -> bytes:
    """The blob of an n×n int64 matrix (``same_as``: the sent matrix, when this is the received
    one, so an equal one is stored as a reference)."""
    m = np.ascontiguousarray(a, dtype=np.int64)
    if same_as is not None and np.array_equal(m, same_as):
        return SAME_AS_SENT
    flat = m.reshape(-1)
    width = _width(m)
    nz = np.flatnonzero(flat)
    if len(nz) * (4 + width) < flat.size * width:
        return (MAGIC + bytes([SPARSE, width]) + nz.astype("<u4").tobytes()
                + flat[nz].astype(_UNSIGNED[width]).tobytes())
    if _HEADER + flat.size * width == flat.size * 8:  # 1×1 at 16 bits: the raw form's length
        width = 4
    return MAGIC + bytes([DENSE, width]) + flat.astype(_UNSIGNED[width]).tobytes()


def encode_stack(stack: np.ndarray) -> list[bytes]:
    """``encode`` of each matrix of a (k, n, n) int64 stack, byte for byte, with the
    layout and width of every matrix decided for the whole stack at once: a batch of 1,000 events
    of 125 calls makes 250 small matrices, and their one-by-one encoding was a fifth of the
    ingest's CPU."""
    k = len(stack)
    flat = stack.reshape(k, -1)
    cells = flat.shape[1]
    if not cells:
        return [encode(m) for m in stack]
    lo, hi = flat.min(axis=1), flat.max(axis=1)
    width = np.where((lo < 0) | (hi >= 1 << 32), 8, np.where(hi < 1 << 8, 1, np.where(hi < 1 << 16, 2, 4)))
    sparse = np.count_nonzero(flat, axis=1) * (4 + width) < cells * width
    # (encode's one exception: a dense 1×1 at 16 bits would have the raw form's length)
    width = np.where(~sparse & (_HEADER + cells * width == cells * 8), 4, width)
    out: list[bytes] = [b""] * k
    for w in np.unique(width).tolist():
        group = np.flatnonzero(width == w)
        cast = flat[group].astype(_UNSIGNED[w])
        dense_head = MAGIC + bytes([DENSE, w])
        sparse_head = MAGIC + bytes([SPARSE, w])
        for row, i in enumerate(group.tolist()):
            if sparse[i]:
                nz = np.flatnonzero(flat[i])
                out[i] = sparse_head + nz.astype("<u4").tobytes() + cast[row, nz].tobytes()
            else:
                out[i] = dense_head + cast[row].tobytes()
    return out


def encode_pairs(sent: np.ndarray, received: np.ndarray) -> list[tuple[bytes, bytes]]:
    """The (sent, received) blobs of each pair of two (k, n, n) stacks, as ``encode(sent)`` and
    ``encode(received, same_as=sent)`` give them."""
    k = len(sent)
    same = (sent.reshape(k, -1) == received.reshape(k, -1)).all(axis=1)
    sent_blobs = encode_stack(sent)
    differ = np.flatnonzero(~same)
    recv_blobs = [SAME_AS_SENT] * k
    for i, blob in zip(differ.tolist(), encode_stack(received[differ]) if len(differ) else [], strict=True):
        recv_blobs[i] = blob
    return list(zip(sent_blobs, recv_blobs, strict=True))


def decode(blob: bytes | memoryview, n: int, *, sent: Matrix | None = None) -> Matrix:
    """The n×n int64 matrix of a stored blob (a new writable array; ``sent`` resolves "same as
    sent")."""
    raw = bytes(blob)
    if len(raw) == n * n * 8:  # raw int64, written before this layout (no encoded blob is this long)
        return np.frombuffer(raw, dtype="<i8").reshape(n, n).copy()
    if len(raw) < _HEADER or raw[:4] != MAGIC or raw[5] not in _UNSIGNED:
        raise MatrixBlobError(f"traffic matrix blob of {len(raw)} bytes is not a {n}×{n} matrix")
    layout, width = raw[4], raw[5]
    body = raw[_HEADER:]
    if layout == SAME:
        if sent is None:
            raise MatrixBlobError("a 'same as sent' matrix read without its sent matrix")
        return np.array(sent, dtype=np.int64, copy=True)
    if layout == DENSE:
        if len(body) != n * n * width:
            raise MatrixBlobError(f"dense matrix blob holds {len(body)} bytes, not {n}×{n}×{width}")
        return np.frombuffer(body, dtype=_UNSIGNED[width]).astype(np.int64).reshape(n, n)
    if layout == SPARSE:
        k, rest = divmod(len(body), 4 + width)
        if rest:
            raise MatrixBlobError(f"sparse matrix blob of {len(body)} bytes is not whole cells")
        idx = np.frombuffer(body[: 4 * k], dtype="<u4").astype(np.int64)
        if k and int(idx.max()) >= n * n:
            raise MatrixBlobError(f"sparse matrix blob names cell {int(idx.max())} of a {n}×{n} matrix")
        out = np.zeros(n * n, dtype=np.int64)
        out[idx] = np.frombuffer(body[4 * k:], dtype=_UNSIGNED[width])
        return out.reshape(n, n)
    raise MatrixBlobError(f"unknown traffic matrix layout {layout}")


# --- (cell, bytes) pairs: a matrix of many ranks, never made dense ---------------------------------
# At 5,632 ranks one dense int64 matrix is 254 MB: a job of 22 EP groups fills 1 cell in 22 of it
# (its groups' blocks), and ingest merged each batch into the stored rows through two of them per
# key, holding SQLite's write lock for seconds. These give the same blobs as ``encode`` and
# ``decode`` from the nonzero cells alone (flat index row·n + column, ascending).

Pairs = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]  # (flat cell indices, values)


def decode_pairs(blob: bytes | memoryview, n: int, *, sent: Pairs | None = None) -> Pairs:
    """The nonzero cells of a stored n×n blob, ascending (``sent``: what "same as sent" means)."""
    raw = bytes(blob)
    if len(raw) >= _HEADER and raw[:4] == MAGIC and raw[4] == SPARSE and len(raw) != n * n * 8:
        width = raw[5]
        if width not in _UNSIGNED:
            raise MatrixBlobError(f"traffic matrix blob of {len(raw)} bytes is not a {n}×{n} matrix")
        k, rest = divmod(len(raw) - _HEADER, 4 + width)
        if rest:
            raise MatrixBlobError(f"sparse matrix blob of {len(raw) - _HEADER} bytes is not whole cells")
        idx = np.frombuffer(raw, dtype="<u4", count=k, offset=_HEADER).astype(np.int64)
        if k and (int(idx.max()) >= n * n or (np.diff(idx) <= 0).any()):
            raise MatrixBlobError(f"sparse matrix blob's cells are not ascending cells of a {n}×{n} matrix")
        vals = np.frombuffer(raw, dtype=_UNSIGNED[width], count=k, offset=_HEADER + 4 * k).astype(np.int64)
        keep = vals != 0
        return idx[keep], vals[keep]
    if len(raw) >= _HEADER and raw[:4] == MAGIC and raw[4] == SAME and len(raw) != n * n * 8:
        if sent is None:
            raise MatrixBlobError("a 'same as sent' matrix read without its sent matrix")
        return sent[0].copy(), sent[1].copy()
    flat = decode(raw, n).reshape(-1)  # dense (or the raw form): only when that was the smaller
    nz = np.flatnonzero(flat)
    return nz.astype(np.int64), flat[nz]


def encode_from_pairs(cells: npt.NDArray[np.int64], vals: npt.NDArray[np.int64], n: int, *,
                      same_as: Pairs | None = None) -> bytes:
    """``encode`` of the n×n matrix whose nonzero cells are ``cells`` (ascending, unique) with
    ``vals``; it is built dense only when its dense blob is the smaller."""
    keep = vals != 0
    cells, vals = cells[keep], vals[keep]
    if same_as is not None and np.array_equal(cells, same_as[0]) and np.array_equal(vals, same_as[1]):
        return SAME_AS_SENT
    total = n * n
    if not len(vals):
        width = 1
    else:
        lo, hi = int(vals.min()), int(vals.max())
        width = 8 if lo < 0 or hi >= 1 << 32 else 1 if hi < 1 << 8 else 2 if hi < 1 << 16 else 4
    if len(cells) * (4 + width) < total * width:
        head = MAGIC + bytes([SPARSE, width])
        return head + cells.astype("<u4").tobytes() + vals.astype(_UNSIGNED[width]).tobytes()
    dense = np.zeros(total, dtype=np.int64)
    dense[cells] = vals
    return encode(dense.reshape(n, n))
