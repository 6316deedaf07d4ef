"""A restricted unpickler for Flight Recorder dumps: plain data only, with bounded work.

FR pickles hold dicts, lists, tuples, strings, numbers, bools and None — none of which needs a
global. ``find_class`` is therefore refused outright, so a pickle that tries to build any object
(``os.system``, ``builtins.eval``, a class with ``__reduce__``) fails before anything runs.

Work is bounded before and after loading: a pre-scan of the opcodes refuses length claims beyond
the data (a ``BINBYTES8`` of 2^60 bytes) and more than ``MAX_OPCODES``; the loaded graph is then
walked with a budget of ``MAX_NODES`` visits, shared references counted each time they are
reached, so an 18 KB pickle whose lists reference each other cannot cost minutes of CPU in the
code that reads it.
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


def _walk(obj: Any) -> None:
    """Visit every reachable value (shared ones each time), within the budget and depth."""
    stack: list[tuple[Any, int]] = [(obj, 0)]
    visits = 0
    while stack:
        value, depth = stack.pop()
        visits += 1
        if visits > MAX_NODES:
            raise pickle.UnpicklingError(
                f"pickle expands to more than {MAX_NODES:,} values (shared references)"
            )
        if depth > MAX_DEPTH:
            raise pickle.UnpicklingError(f"pickle nests deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
            stack.extend((k, depth + 1) for k in value if not isinstance(k, str | int))
        elif isinstance(value, list | tuple | set | frozenset):
            stack.extend((v, depth + 1) for v in value)


def loads_plain(data: bytes) -> Any:
    if len(data) > MAX_PICKLE_BYTES:
        raise pickle.UnpicklingError(f"pickle larger than {MAX_PICKLE_BYTES} bytes")
    _prescan(data)
    obj = PlainDataUnpickler(io.BytesIO(data)).load()
    _walk(obj)
    return obj
