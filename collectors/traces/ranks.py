"""Which rank a trace file is: the file says (``distributedInfo.rank``), else its name or folder
does (``trace_rank3.json``, ``rank-3/``, ``worker_rank_3.pt.trace.json.gz``), else the caller."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from collectors.traces.errors import TraceFormatError

MAX_RANK = (1 << 24) - 1  # 16 M ranks: beyond any job; a larger "rank" is a broken or hostile file
_RANK_IN_NAME = re.compile(r"(?i)(?:^|[^a-z0-9])rank[-_ ]?(\d{1,7})(?!\d)")


def rank_from_name(name: str) -> int | None:
    """The rank a path names: the file name first, then its folders from the innermost out."""
    parts = PurePosixPath(name.replace("\\", "/")).parts
    for part in reversed(parts):
        m = _RANK_IN_NAME.search(part)
        if m is not None:
            return int(m.group(1))
    return None


def resolve_rank(in_file: object, name: str, given: int | None) -> tuple[int | None, str]:
    """(rank, where it came from: ``distributedInfo`` | ``file name`` | ``given``); a rank beyond
    ``MAX_RANK`` from any of them is a ``TraceFormatError``."""
    if type(in_file) is int and in_file >= 0:
        return _bounded(in_file, "distributedInfo.rank"), "distributedInfo"
    from_name = rank_from_name(name) if name else None
    if from_name is not None:
        return _bounded(from_name, f"the rank in the file name {name!r}"), "file name"
    return (None if given is None else _bounded(given, "the rank given")), "given"


def _bounded(rank: int, what: str) -> int:
    if rank > MAX_RANK:
        raise TraceFormatError(f"{what} ({rank}) is out of range (at most {MAX_RANK:,})")
    return rank
