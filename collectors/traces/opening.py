"""A trace file as a stream of decompressed bytes, with its limits enforced before they cost.

gzip is detected by its magic bytes and inflated chunk by chunk (``zlib`` with ``max_length``, so
one read never produces more than asked for): the decompressed size is capped, and so is the
ratio of decompressed to compressed bytes read so far (a 2 MB gzip that inflates to 1 GB is
refused after a few MB, not after the gigabyte). Truncated or corrupt gzip is a
``TraceFormatError`` saying so, never ``EOFError`` or ``zlib.error``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import IO

from collectors.traces.errors import TraceFormatError

GZIP_MAGIC = b"\x1f\x8b"
READ_BYTES = 1 << 20


@dataclass(frozen=True)
class Limits:
    """Bounds on one trace file (decompressed bytes, inflation ratio, one record's size and depth)."""

    max_bytes: int = 8 << 30  # decompressed size of one file
    max_ratio: int = 200  # decompressed / compressed bytes (JSON traces compress 5-30x)
    ratio_slack: int = 16 << 20  # ratio judged only past this many decompressed bytes
    # one event / entry / line: real Kineto events are a few KB (args with shapes); one record is
    # held about 4 times while cut and decoded, so 16 MB keeps a hostile one under ~70 MB
    max_record_bytes: int = 16 << 20
    max_depth: int = 64  # JSON nesting of one record (Kineto events nest 4-5 deep)
    max_header_bytes: int = 32 << 20  # top-level members other than the event array


DEFAULT_LIMITS = Limits()


class TraceBytes:
    """``read(n)`` of decompressed bytes from a raw binary stream (plain or gzip)."""

    def __init__(self, raw: IO[bytes], what: str = "trace", limits: Limits = DEFAULT_LIMITS) -> None:
        self.raw, self.what, self.limits = raw, what, limits
        head = raw.read(2)
        self.gzip = head == GZIP_MAGIC
        self._pending = b"" if self.gzip else head  # plain bytes read but not yet returned
        self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS) if self.gzip else None
        self._tail = head if self.gzip else b""  # compressed bytes not yet fed to zlib
        self.raw_bytes = len(head)
        self.out_bytes = 0
        self._eof = False

    def read(self, size: int = READ_BYTES) -> bytes:
        if self.gzip:
            data = self._inflate(size)
        else:
            fresh = self.raw.read(max(size - len(self._pending), 1))
            self.raw_bytes += len(fresh)
            data, self._pending = self._pending + fresh, b""
        self.out_bytes += len(data)
        if self.out_bytes > self.limits.max_bytes:
            raise TraceFormatError(
                f"{self.what}: more than {self.limits.max_bytes:,} bytes (decompressed); refused"
            )
        return data

    def _inflate(self, size: int) -> bytes:
        assert self._zlib is not None
        out = bytearray()
        while len(out) < size and not self._eof:
            if self._zlib.unconsumed_tail:
                chunk = self._zlib.unconsumed_tail
            elif self._tail:
                chunk, self._tail = self._tail, b""
            else:
                chunk = self.raw.read(READ_BYTES)
                self.raw_bytes += len(chunk)
                if not chunk:
                    if not self._zlib.eof:
                        raise TraceFormatError(
                            f"{self.what}: gzip stream truncated (ended before its end marker)"
                        )
                    self._eof = True
                    break
            try:
                out += self._zlib.decompress(chunk, size - len(out))
            except zlib.error as exc:
                raise TraceFormatError(f"{self.what}: corrupt gzip data ({exc})") from exc
            if self._zlib.eof:  # a member ended: concatenated members are one stream (gzip -c a b)
                rest = self._zlib.unused_data
                self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
                self._tail = rest
                if not rest:
                    more = self.raw.read(READ_BYTES)
                    self.raw_bytes += len(more)
                    if not more:
                        self._eof = True
                    self._tail = more
            self._check_ratio(len(out))
        return bytes(out)

    def _check_ratio(self, fresh: int) -> None:
        total = self.out_bytes + fresh
        lim = self.limits
        if total > lim.ratio_slack and total > lim.max_ratio * max(self.raw_bytes, 1):
            raise TraceFormatError(
                f"{self.what}: gzip inflates more than {lim.max_ratio}x "
                f"({total:,} bytes from {self.raw_bytes:,}); refused as a decompression bomb"
            )
