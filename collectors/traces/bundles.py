"""A whole job's traces at once: a folder, or a tar / tar.gz / zip archive of one file per rank.

``open_bundle`` tells a bundle from a single trace by its bytes (zip's ``PK``, tar's ``ustar``
at offset 257, also inside gzip) and yields ``(member name, binary stream)`` in name order for
zip and folders, archive order for tar (read as a stream, never extracted to disk). Limits are
checked before a member is read: at most ``MAX_MEMBERS`` traces, each under the per-file
decompressed cap, zip members under the inflation ratio.
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from collectors.traces.errors import TraceFormatError
from collectors.traces.opening import DEFAULT_LIMITS, GZIP_MAGIC, Limits, TraceBytes

MAX_MEMBERS = 4096
_SKIP = ("__MACOSX/", "._")
_TRACE_SUFFIXES = (".json", ".json.gz", ".gz", ".jsonl", ".log", ".pkl", ".pickle", ".trace")

Member = tuple[str, IO[bytes]]


def _peek(stream: IO[bytes]) -> bytes:
    start = stream.tell()
    head = stream.read(512)
    stream.seek(start)
    if head[:2] == GZIP_MAGIC:
        try:
            head = TraceBytes(stream, "archive").read(512)
        except TraceFormatError:
            head = b""
        stream.seek(start)
    return head


def is_bundle(stream: IO[bytes]) -> bool:
    head = _peek(stream)
    return head[:4] == b"PK\x03\x04" or head[257:262] == b"ustar"


def _wanted(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return (
        bool(base)
        and not name.startswith(_SKIP)
        and not base.startswith(".")
        and base.endswith(_TRACE_SUFFIXES)
    )


def open_bundle(stream: IO[bytes], what: str, limits: Limits = DEFAULT_LIMITS) -> Iterator[Member]:
    head = _peek(stream)
    if head[:4] == b"PK\x03\x04":
        yield from _zip_members(stream, what, limits)
    else:
        yield from _tar_members(stream, what, limits)


def _zip_members(stream: IO[bytes], what: str, limits: Limits) -> Iterator[Member]:
    try:
        archive = zipfile.ZipFile(stream)
        infos = sorted(
            (i for i in archive.infolist() if not i.is_dir() and _wanted(i.filename)),
            key=lambda i: i.filename,
        )
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise TraceFormatError(f"{what}: not a readable zip archive ({exc})") from exc
    _count(len(infos), what)
    for info in infos:
        if info.file_size > limits.max_bytes:
            raise TraceFormatError(f"{what}: {info.filename} claims {info.file_size:,} bytes; refused")
        if info.file_size > limits.ratio_slack and info.file_size > limits.max_ratio * max(
            info.compress_size, 1
        ):
            raise TraceFormatError(f"{what}: {info.filename} inflates more than {limits.max_ratio}x; refused")
        try:
            with archive.open(info) as member:
                yield info.filename, member
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise TraceFormatError(f"{what}: {info.filename}: corrupt zip member ({exc})") from exc


def _tar_members(stream: IO[bytes], what: str, limits: Limits) -> Iterator[Member]:
    plain = TraceBytes(stream, what, limits)  # gzip inflated with its caps; tar read as a stream
    seen = 0
    try:
        with tarfile.open(fileobj=_Reader(plain), mode="r|") as archive:
            for info in archive:
                if not info.isfile() or not _wanted(info.name):
                    continue
                seen += 1
                _count(seen, what)
                member = archive.extractfile(info)
                if member is not None:
                    yield info.name, member
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise TraceFormatError(f"{what}: not a readable tar archive ({exc})") from exc


class _Reader(io.RawIOBase):
    """``TraceBytes`` as the file object tarfile's stream mode reads."""

    def __init__(self, src: TraceBytes) -> None:
        self.src = src

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self.src.read(size if size and size > 0 else 1 << 20)


def folder_members(path: Path) -> Iterator[Member]:
    files = sorted(p for p in path.rglob("*") if p.is_file() and _wanted(p.relative_to(path).as_posix()))
    _count(len(files), str(path))
    for p in files:
        with p.open("rb") as f:
            yield p.relative_to(path).as_posix(), f


def _count(n: int, what: str) -> None:
    if n > MAX_MEMBERS:
        raise TraceFormatError(f"{what}: more than {MAX_MEMBERS} trace files; import it in parts")
