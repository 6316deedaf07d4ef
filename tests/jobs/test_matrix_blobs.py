"""The stored form of traffic matrices: every layout round-trips, old raw rows stay readable,
and what is written follows the bytes sent (not rank²)."""

import numpy as np
import pytest

from fabricmon.jobs import matrix_blobs as mb


@pytest.mark.parametrize("hi", [0, 200, 60_000, 4_000_000_000, 2**40])
def test_dense_round_trip_in_the_narrowest_width(hi: int) -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(1, hi + 2, size=(16, 16), dtype=np.int64)
    a[0, 0] = hi
    blob = mb.encode(a)
    assert np.array_equal(mb.decode(blob, 16), a)
    width = blob[5]
    assert width == (1 if hi < 256 else 2 if hi < 65536 else 4 if hi < 2**32 else 8)
    assert len(blob) == 6 + 256 * width


def test_negative_cells_keep_int64() -> None:
    a = np.array([[-5, 3], [7, 2**50]], dtype=np.int64)
    assert np.array_equal(mb.decode(mb.encode(a), 2), a)


def test_a_few_pairs_of_many_ranks_are_stored_sparse() -> None:
    a = np.zeros((3000, 3000), dtype=np.int64)  # what a hostile rank=3000 batch would make
    a[2999, 17] = 123_456
    blob = mb.encode(a)
    assert len(blob) < 20  # 6 header + one index + one 32-bit value, not 72 MB
    assert np.array_equal(mb.decode(blob, 3000), a)


def test_received_equal_to_sent_is_a_reference() -> None:
    sent = np.arange(64, dtype=np.int64).reshape(8, 8)
    assert mb.encode(sent.copy(), same_as=sent) == mb.SAME_AS_SENT
    assert np.array_equal(mb.decode(mb.SAME_AS_SENT, 8, sent=sent), sent)
    other = sent.copy()
    other[1, 1] += 1
    assert np.array_equal(mb.decode(mb.encode(other, same_as=sent), 8, sent=sent), other)
    with pytest.raises(mb.MatrixBlobError, match="without its sent"):
        mb.decode(mb.SAME_AS_SENT, 8)


def test_raw_int64_rows_from_before_stay_readable_and_never_collide() -> None:
    a = np.array([[1, 2], [3, 4]], dtype="<i8")
    assert np.array_equal(mb.decode(a.tobytes(), 2), a)
    one = np.array([[300]], dtype=np.int64)  # 1×1 at 16 bits would be 8 bytes: the raw length
    blob = mb.encode(one)
    assert len(blob) != 8 and np.array_equal(mb.decode(blob, 1), one)


@pytest.mark.parametrize("blob", [b"", b"junk", mb.MAGIC + bytes([0, 3]), mb.MAGIC + bytes([9, 4]) + b"x" * 4,
                                  mb.MAGIC + bytes([0, 4]) + b"\0" * 5,
                                  mb.MAGIC + bytes([1, 4]) + (99).to_bytes(4, "little") + b"\0" * 4])
def test_a_broken_blob_is_a_clear_error(blob: bytes) -> None:
    with pytest.raises(mb.MatrixBlobError):
        mb.decode(blob, 2)


def _stack_cases() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    cases = []
    for n in (1, 2, 8, 33):
        k = 12
        sent = rng.integers(0, 300, size=(k, n, n), dtype=np.int64)
        sent[1] *= 1000  # 32-bit cells
        sent[2] *= 10**8  # 64-bit cells
        sent[3] = 0  # empty: sparse with no cell
        sent[4] = 0
        sent[4, 0, n - 1] = 5  # one pair of many ranks: sparse
        sent[5, 0, 0] = -7  # a negative cell keeps int64
        sent[6] = 300  # 16-bit (the 1×1 case has the raw form's length: 32-bit)
        received = sent.copy()
        received[::3] += 1  # every third differs from its sent matrix
        cases.append((sent, received))
    return cases


@pytest.mark.parametrize("case", range(4))
def test_stacks_encode_byte_for_byte_as_one_by_one(case: int) -> None:
    """``encode_pairs`` (a batch's new matrices at once) gives exactly ``encode``'s blobs."""
    sent, received = _stack_cases()[case]
    got = mb.encode_pairs(sent, received)
    want = [(mb.encode(s), mb.encode(r, same_as=s)) for s, r in zip(sent, received, strict=True)]
    assert got == want
    assert {blob[4] for blob, _ in got if blob != mb.SAME_AS_SENT} >= {mb.DENSE, mb.SPARSE}
    assert sum(r == mb.SAME_AS_SENT for _, r in got) == 8


@pytest.mark.parametrize(("n", "fill", "hi"), [(1, 1.0, 60_000), (8, 1.0, 200), (40, 0.05, 2**40), (40, 0.0, 5),
                                               (300, 0.01, 4_000_000_000), (64, 0.9, 70_000)])
def test_pairs_give_the_blobs_and_cells_of_the_dense_forms(n: int, fill: float, hi: int) -> None:
    """A matrix of many ranks is written from its nonzero cells: byte for byte what ``encode`` of
    the dense matrix gives (sparse, dense, same as sent), and ``decode_pairs`` reads every form."""
    rng = np.random.default_rng(n)
    a = np.where(rng.random((n, n)) < fill, rng.integers(1, hi + 1, size=(n, n)), 0).astype(np.int64)
    cells = np.flatnonzero(a)
    vals = a.reshape(-1)[cells]
    assert mb.encode_from_pairs(cells, vals, n) == mb.encode(a)
    b = a.copy()
    b[0, 0] += 1
    b_cells = np.flatnonzero(b)
    assert mb.encode_from_pairs(b_cells, b.reshape(-1)[b_cells], n, same_as=(cells, vals)) == mb.encode(b, same_as=a)
    assert mb.encode_from_pairs(cells, vals, n, same_as=(cells, vals)) == mb.SAME_AS_SENT
    for blob in (mb.encode(a), a.astype("<i8").tobytes()):  # this layout, and the raw rows of old
        got = mb.decode_pairs(blob, n)
        assert np.array_equal(got[0], cells) and np.array_equal(got[1], vals)
    same = mb.decode_pairs(mb.SAME_AS_SENT, n, sent=(cells, vals))
    assert np.array_equal(same[0], cells) and np.array_equal(same[1], vals)


def test_decode_pairs_rejects_what_is_not_a_matrix_of_its_size() -> None:
    blob = mb.encode_from_pairs(np.array([5, 3000 * 3000 - 1]), np.array([1, 2]), 3000)
    with pytest.raises(mb.MatrixBlobError):
        mb.decode_pairs(blob, 2000)  # a cell beyond 2000×2000
    with pytest.raises(mb.MatrixBlobError):
        mb.decode_pairs(blob[:-1], 3000)  # not whole cells
    with pytest.raises(mb.MatrixBlobError):
        mb.decode_pairs(mb.SAME_AS_SENT, 3000)
