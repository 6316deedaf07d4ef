"""The fast path's reading of the per-pg-rank lists (``send_bytes_per_pg_rank``: entry i is the
bytes to or from global rank ``pg_ranks[i]``; ``validation.expand_aligned`` is the careful
reading). A batch's lists are read like its peer maps: their text checked and joined, all their
numbers read in one C call; the peers are the lines' ``pg_ranks``, parsed once per distinct
group. Anything unusual (spacing aside) leaves the line to the careful path, which names it.
"""

from __future__ import annotations

import numpy as np
import orjson

from fabricmon.jobs.columns import NONE
from fabricmon.jobs.validation import INT64_MAX

_NULL = b"null"
_BIG = 10**18  # values from here up go to the careful path (the text reader saturates at int64)
_LIST_SKELETON = b"[]"
_NOT_LIST = b"0123456789, "  # what a plain list's text holds between its brackets
_CLOSE_TO_COMMA = bytes(44 if c == ord("]") else c for c in range(256))


def group_ranks(raw: bytes) -> np.ndarray | None:
    """A ``pg_ranks`` text as the int64 ranks a per-pg-rank list is for: None when it is not a
    list of distinct non-negative integers (the careful path names what is wrong)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(value) is not list or not all(type(r) is int and 0 <= r <= INT64_MAX for r in value):
        return None
    ranks = np.array(value, dtype=np.int64)
    return ranks if len(np.unique(ranks)) == len(ranks) else None


def aligned_columns(
    raws: list[bytes], groups: list[np.ndarray | None], max_rank: int = INT64_MAX
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-pg-rank list texts (``null``: absent) and each line's group ranks → (counts, ok, peers,
    bytes) as ``ndjson._peer_columns`` gives them for maps: counts[i] is -1 for an absent list;
    ok[i] false sends line i to the careful path; peers/bytes are flat for the ok lists, in order."""
    n = len(raws)
    counts = np.full(n, NONE, dtype=np.int64)
    ok = np.ones(n, dtype=bool)
    present = [i for i, t in enumerate(raws) if t != _NULL]
    if not present:
        return counts, ok, np.zeros(0, np.int64), np.zeros(0, np.int64)
    texts = [raws[i] for i in present]
    joined = b"".join(texts)
    a = np.frombuffer(joined, dtype=np.uint8)
    starts = np.zeros(len(texts), dtype=np.int64)
    np.cumsum(np.fromiter(map(len, texts[:-1]), dtype=np.int64, count=len(texts) - 1), out=starts[1:])
    # entries per list: its commas, plus one if it has a digit (all the batch's lists in two passes)
    k = np.add.reduceat(a == ord(","), starts) + (np.add.reduceat(np.less(a - ord("0"), 10), starts) > 0)
    plain = (joined.translate(None, _NOT_LIST) == _LIST_SKELETON * len(texts)) or None
    k_list = k.tolist()
    use: list[int] = []
    for j, i in enumerate(present):
        g = groups[i]
        shaped = plain or texts[j].translate(None, _NOT_LIST) == _LIST_SKELETON
        if g is None or len(g) != k_list[j] or not shaped:
            ok[i] = False
            continue
        counts[i] = k_list[j]
        if k_list[j]:
            use.append(i)
    values = _numbers([raws[i] for i in use], counts[use])
    if values is None:  # a field the text reader would not read as written: all to the careful path
        ok[present] = False
        counts[present] = NONE
        return counts, ok, np.zeros(0, np.int64), np.zeros(0, np.int64)
    peers = np.concatenate([groups[i] for i in use]) if use else np.zeros(0, np.int64)  # type: ignore[misc]
    owner = np.repeat(np.array(use, dtype=np.int64), counts[use])
    bad = owner[(values >= _BIG) | (peers >= max_rank)]
    if len(bad):
        ok[bad] = False
        counts[bad] = NONE
        keep = ok[owner]
        peers, values = peers[keep], values[keep]
    return counts, ok, peers, values


def _numbers(texts: list[bytes], counts: np.ndarray) -> np.ndarray | None:
    """The numbers of non-empty list texts (checked: digits, commas, blanks, brackets), in order;
    None if a field is empty or longer than 18 digits."""
    if not texts:
        return np.zeros(0, np.int64)
    numbers = b"".join(texts).translate(_CLOSE_TO_COMMA, b"[ ")[:-1]
    b = np.frombuffer(numbers, dtype=np.uint8)
    comma = b == ord(",")
    fields = np.diff(np.flatnonzero(comma), prepend=-1, append=len(b)) - 1
    if len(fields) != int(counts.sum()) or ((fields < 1) | (fields > 18)).any():
        return None
    # every field is [0-9]{1,18}: the text reader reads it all and never warns
    values = np.fromstring(numbers, dtype=np.int64, sep=",")
    return values if len(values) == len(fields) else None


def merged(
    n: int, maps: tuple[np.ndarray, np.ndarray, np.ndarray], lists: tuple[np.ndarray, np.ndarray, np.ndarray],
    from_list: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One direction's (counts, peers, bytes) of a batch whose lines give maps or lists
    (``from_list``), flat in line order as if every line had given a map."""
    if not from_list.any():
        return maps
    counts = np.where(from_list, lists[0], maps[0])
    if from_list.all():
        return counts, lists[1], lists[2]
    owner = np.concatenate([np.repeat(np.arange(n), np.maximum(c, 0)) for c in (maps[0], lists[0])])
    order = np.argsort(owner, kind="stable")
    return (counts, np.concatenate([maps[1], lists[1]])[order], np.concatenate([maps[2], lists[2]])[order])
