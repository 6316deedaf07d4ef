"""A restricted unpickler for Flight Recorder dumps: plain data only.

FR pickles hold dicts, lists, tuples, strings, numbers, bools and None — none of which needs a
global. ``find_class`` is therefore refused outright, so a pickle that tries to build any object
(``os.system``, ``builtins.eval``, a class with ``__reduce__``) fails before anything runs.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

MAX_PICKLE_BYTES = 512 * 1024 * 1024


class ForbiddenPickle(pickle.UnpicklingError):
    """The pickle asked for a global (code or a class): refused, nothing executed."""


class PlainDataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise ForbiddenPickle(
            f"pickle refers to {module}.{name}; only plain data (dict, list, str, numbers) is accepted"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise ForbiddenPickle("pickle uses persistent ids; only plain data is accepted")


def loads_plain(data: bytes) -> Any:
    if len(data) > MAX_PICKLE_BYTES:
        raise pickle.UnpicklingError(f"pickle larger than {MAX_PICKLE_BYTES} bytes")
    return PlainDataUnpickler(io.BytesIO(data)).load()
