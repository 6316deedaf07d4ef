"""Which rank a trace file is: the file says (``distributedInfo.rank``), else its name or folder
does (``trace_rank3.json``, ``rank-3/``, ``worker_rank_3.pt.trace.json.gz``), else the caller."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

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
    """(rank, where it came from: ``distributedInfo`` | ``file name`` | ``given``)."""
    if type(in_file) is int and in_file >= 0:
        return in_file, "distributedInfo"
    from_name = rank_from_name(name) if name else None
    if from_name is not None:
        return from_name, "file name"
    return given, "given"
