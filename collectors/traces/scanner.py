"""Stream the one big array of a JSON trace (``traceEvents``, ``entries``) in decoded batches.

A Kineto trace is ``{header members…, "traceEvents": [event, event, …], more members…}``. The
array is cut into chunks of a few MB at item boundaries and each chunk is decoded in C by msgspec
into typed records (``item_type``); the members around the array are kept as the header. Memory
follows the chunk size, never the file size.

Where to cut: the last ``}``, ``{`` pair in the chunk is tried first (that is how every writer
separates events); if the chunk does not decode, its exact boundary is found by a tokenizer that
skips strings, which also bounds the nesting depth. A decode error inside a correctly cut chunk
is the file's own fault: a ``TraceFormatError`` naming the item and byte offset. Type errors (a
string ``ts``, a list where an event belongs) name the item and field.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

import msgspec
import orjson

from collectors.traces.errors import TraceFormatError
from collectors.traces.opening import TraceBytes

T = TypeVar("T")
CHUNK_BYTES = 4 << 20
_CUT = re.compile(rb"\}\s*,\s*(?=\{)")
# a string is matched "unrolled" (runs of plain bytes, then one escape at a time): the form
# (?:[^"\\]|\\.)* keeps regex state per character, 4.3 GB for one 40 MB string
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)|[\[\]{}]', re.DOTALL)
_WS = b" \t\r\n"
_PATH_INDEX = re.compile(r"^\$\[(\d+)\](.*)$")


class ArrayScan(Generic[T]):
    """Batches of ``item_type`` records from the array under ``key``; then ``header``."""

    def __init__(self, src: TraceBytes, key: str, item_type: type[T], what: str) -> None:
        self.src, self.key, self.what = src, key.encode(), what
        self.decoder = msgspec.json.Decoder(list[item_type])  # type: ignore[valid-type]
        self.header: dict[str, Any] = {}
        self.items = 0  # items decoded so far (for error messages)
        self._offset = 0  # byte offset of the start of ``buf`` in the decompressed file
        self._eof = False

    # -- reading ------------------------------------------------------------------------------
    def _more(self, buf: bytes) -> bytes:
        if self._eof:
            return buf
        chunk = self.src.read(CHUNK_BYTES)
        if not chunk:
            self._eof = True
        return buf + chunk

    def batches(self) -> Iterator[list[T]]:
        buf, prefix = self._find_array()
        if prefix is None:  # no array at all: the header is the whole document
            return
        while True:
            buf = buf.lstrip(_WS)
            if len(buf) < CHUNK_BYTES and not self._eof:
                buf = self._more(buf)
                continue
            if buf[:1] == b"]":
                self._finish(prefix, buf[1:])
                return
            cut = self._fast_cut(buf)
            if cut is not None:
                batch, used = cut
            elif not self._eof and len(buf) <= self.src.limits.max_record_bytes:
                buf = self._more(buf)  # one item larger than the chunk, or a cut that failed: read on
                continue
            else:
                batch, used, closed = self._exact_cut(buf)
                if closed is not None:
                    yield batch
                    self._finish(prefix, buf[closed + 1 :])
                    return
            yield batch
            self._offset += used
            buf = buf[used:]

    def _find_array(self) -> tuple[bytes, bytes | None]:
        """Read up to the array's ``[``; returns (bytes after it, header text before the key)."""
        buf = b""
        pattern = re.compile(rb'"' + re.escape(self.key) + rb'"\s*:\s*\[')
        limit = self.src.limits.max_header_bytes
        while True:
            head = buf.lstrip(_WS)
            if head[:1] == b"[":  # a bare array (Chrome's JSON Array Format): no header
                self._offset = len(buf) - len(head) + 1
                return head[1:], b""
            m = pattern.search(buf)
            if m is not None:
                self._offset = m.end()
                return buf[m.end() :], buf[: m.start()]
            if self._eof:
                self.header = self._parse_header(buf)
                return b"", None
            if len(buf) > limit:
                raise TraceFormatError(
                    f"{self.what}: no {self.key.decode()!r} array in the first {limit:,} bytes"
                )
            buf = self._more(buf)

    def _finish(self, prefix: bytes, rest: bytes) -> None:
        limit = self.src.limits.max_header_bytes
        while not self._eof:
            if len(rest) > limit:
                raise TraceFormatError(f"{self.what}: more than {limit:,} bytes after the event array")
            rest = self._more(rest)
        if not prefix:  # bare array: nothing may follow but white space
            if rest.strip(_WS):
                raise self._error(0, "data after the closing ']' of the event array")
            return
        self.header = self._parse_header(prefix + b'"' + self.key + b'": []' + rest)

    def _parse_header(self, text: bytes) -> dict[str, Any]:
        try:
            header = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise TraceFormatError(f"{self.what}: not valid JSON outside the event array ({exc})") from exc
        if not isinstance(header, dict):
            raise TraceFormatError(f"{self.what}: the document is not a JSON object or array")
        return header

    # -- cutting ------------------------------------------------------------------------------
    def _decode(self, region: bytes, strict: bool) -> list[T] | None:
        """Decode ``region`` (items separated by commas); None if it is not valid JSON and
        ``strict`` is off (the cut may have been wrong)."""
        try:
            batch = self.decoder.decode(b"[" + region + b"]")
        except msgspec.ValidationError as exc:
            raise self._validation_error(exc) from exc
        except msgspec.DecodeError as exc:
            if not strict:
                return None
            raise self._error(0, f"not valid JSON ({exc})") from exc
        except RecursionError as exc:
            raise self._error(0, "nesting too deep inside an event") from exc
        self.items += len(batch)
        return batch

    def _fast_cut(self, buf: bytes) -> tuple[list[T], int] | None:
        window = max(len(buf) - (1 << 20), 0)
        last = None
        for last in _CUT.finditer(buf, window):  # noqa: B007 - the last match is the one wanted
            pass
        if last is None and window:
            for last in _CUT.finditer(buf):  # noqa: B007
                pass
        if last is None:
            return None
        batch = self._decode(buf[: last.start() + 1], strict=False)
        return None if batch is None else (batch, last.end())

    def _exact_cut(self, buf: bytes) -> tuple[list[T], int, int | None]:
        """Tokenize: the end of the last whole item, and the array's ``]`` if it is in ``buf``."""
        depth, end, max_depth = 0, -1, self.src.limits.max_depth
        closed = None
        for m in _TOKEN.finditer(buf):
            c = buf[m.start()]
            if c == 0x22:  # a string: skipped whole
                if m.end() == len(buf) and (m.end() - m.start() < 2 or buf[m.end() - 1] != 0x22):
                    break  # a string cut by the chunk's end
                continue
            if c in b"[{":
                depth += 1
                if depth > max_depth:
                    raise self._error(m.start(), f"nesting deeper than {max_depth} levels")
            else:
                depth -= 1
                if depth == 0:
                    end = m.end()
                elif depth < 0:
                    closed = m.start()
                    break
        if closed is None and not self._eof:
            if end < 0:
                raise self._error(0, f"one item larger than {self.src.limits.max_record_bytes:,} bytes")
        elif closed is None:
            raise self._error(len(buf), "not valid JSON: file ends inside the event array (truncated?)")
        region = buf[: end if end >= 0 else 0]
        if closed is not None and end < 0:
            region = buf[:closed]
        batch = self._decode(region.rstrip(_WS).rstrip(b","), strict=True) if region.strip(_WS) else []
        used = end if end >= 0 else 0
        if closed is None:
            rest = buf[used:].lstrip(_WS)
            used = len(buf) - len(rest)
            if rest[:1] == b",":
                used += 1
        return batch or [], used, closed

    # -- errors -------------------------------------------------------------------------------
    def _error(self, at: int, why: str) -> TraceFormatError:
        return TraceFormatError(
            f"{self.what}: {why} (near byte {self._offset + at:,}, after item {self.items:,})"
        )

    def _validation_error(self, exc: msgspec.ValidationError) -> TraceFormatError:
        text = str(exc)
        where = text.rsplit(" - at `", 1)
        path = where[1].rstrip("`") if len(where) == 2 else ""
        m = _PATH_INDEX.match(path)
        if m is None:
            return self._error(0, text)
        item, field = self.items + int(m.group(1)), m.group(2).lstrip(".") or "(the item itself)"
        return TraceFormatError(f"{self.what}: item {item:,} of {self.key.decode()!r}, {field}: {where[0]}")
