"""A restricted unpickler for Flight Recorder dumps: plain data only, with bounded work.

FR pickles hold dicts, lists, tuples, strings, numbers, bools and None — none of which needs a
global. ``find_class`` is therefore refused outright, so a pickle that tries to build any object
(``os.system``, ``builtins.eval``, a class with ``__reduce__``) fails before anything runs.

Work is bounded before and after loading: a pre-scan of the opcodes refuses length claims beyond
the data (a ``BINBYTES8`` of 2^60 bytes) and more than ``MAX_OPCODES``; the loaded graph is then
sized with a budget of ``MAX_NODES`` values, shared references counted each time they are
reached (but each container expanded once), so an 18 KB pickle whose lists reference each other
costs neither the reader nor the walk itself seconds of CPU.
"""

from __future__ import annotations

import io
import pickle
import pickletools
from typing import Any

MAX_PICKLE_BYTES = 512 * 1024 * 1024
MAX_OPCODES = 20_000_000
MAX_NODES = 5_000_000
MAX_DEPTH = 64


class ForbiddenPickle(pickle.UnpicklingError):
    """The pickle asked for a global (code or a class): refused, nothing executed."""


class PlainDataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise ForbiddenPickle(
            f"pickle refers to {module}.{name}; only plain data (dict, list, str, numbers) is accepted"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise ForbiddenPickle("pickle uses persistent ids; only plain data is accepted")


def _prescan(data: bytes) -> None:
    n = 0
    try:
        for _op in pickletools.genops(io.BytesIO(data)):  # globals are refused by find_class, by name
            n += 1
            if n > MAX_OPCODES:
                raise pickle.UnpicklingError(f"pickle has more than {MAX_OPCODES:,} opcodes")
    except ValueError as exc:  # genops: a length claim beyond the data, a bad opcode
        raise pickle.UnpicklingError(str(exc)) from exc


_CONTAINERS = (dict, list, tuple, set, frozenset)


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [*value.values(), *(k for k in value if not isinstance(k, str | int))]
    return list(value)


def _walk(obj: Any) -> None:
    """Count the values a reader of ``obj`` would visit (a shared container once per reference)
    and its nesting, refusing past the budget. Each distinct container is expanded once and its
    expanded size and height are remembered, so the walk costs the pickle's own size, not the
    2^40 paths 40 self-doubling lists describe (the budget used to be spent by visiting them:
    seconds of CPU for an 18 KB pickle)."""
    if not isinstance(obj, _CONTAINERS):
        return
    size: dict[int, int] = {}  # id(container) → values reachable from it, shared ones each time
    height: dict[int, int] = {}
    expanding: set[int] = set()  # containers on the current path (a cycle refers back to one)
    stack: list[tuple[Any, bool]] = [(obj, False)]
    while stack:
        value, done = stack.pop()
        key = id(value)
        kids = [c for c in _children(value) if isinstance(c, _CONTAINERS)]
        if done:
            expanding.discard(key)
            total = 1 + len(value) + sum(size[id(c)] - 1 for c in kids)
            if total > MAX_NODES:
                raise pickle.UnpicklingError(
                    f"pickle expands to more than {MAX_NODES:,} values (shared references)"
                )
            size[key] = total
            height[key] = 1 + max((height[id(c)] for c in kids), default=0)
            if height[key] > MAX_DEPTH:
                raise pickle.UnpicklingError(f"pickle nests deeper than {MAX_DEPTH} levels")
            continue
        if key in size:
            continue
        if key in expanding:
            raise pickle.UnpicklingError("pickle refers to itself (a cycle); plain data has none")
        expanding.add(key)
        stack.append((value, True))
        stack.extend((c, False) for c in kids if id(c) not in size)


def loads_plain(data: bytes) -> Any:
    if len(data) > MAX_PICKLE_BYTES:
        raise pickle.UnpicklingError(f"pickle larger than {MAX_PICKLE_BYTES} bytes")
    _prescan(data)
    obj = PlainDataUnpickler(io.BytesIO(data)).load()
    _walk(obj)
    return obj
