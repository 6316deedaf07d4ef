"""Field readers of the topology file: each checks one value and says what was expected.

A :class:`_Reader` collects every problem with where it was found, so ``load_fabric`` reports them
all at once; the converters (``_pos_int``, ``_choice`` …) raise ``ValueError`` with the expectation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast


class TopologyError(ValueError):
    """A topology file that cannot be imported; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        n = len(problems)
        head = f"{n} problem{'s' if n != 1 else ''} in topology:"
        super().__init__("\n".join([head, *problems]))


class _Missing:
    pass


_MISSING = _Missing()


@dataclass
class _Reader:
    """Collects problems while pulling typed fields out of plain YAML data."""

    source: str
    problems: list[str]

    def error(self, where: str, message: str, field: str | None = None) -> None:
        prefix = f"{self.source}: {where}: " if where else f"{self.source}: "
        line = f"{prefix}field '{field}': {message}" if field else f"{prefix}{message}"
        if line not in self.problems:  # a bad default would otherwise repeat once per switch
            self.problems.append(line)

    def mapping(self, value: Any, where: str, field: str | None = None) -> Mapping[str, Any] | None:
        if isinstance(value, Mapping):
            return value
        self.error(where, f"expected a mapping, got {_show(value)}", field)
        return None

    def items(self, doc: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> list[Any]:
        value = doc.get(key, _MISSING)
        if value is _MISSING or value is None:
            if required:
                self.error(where, "missing", key)
            return []
        if not isinstance(value, list):
            self.error(where, f"expected a list, got {_show(value)}", key)
            return []
        return value

    def field(self, doc: Mapping[str, Any], key: str, where: str, check: Callable[[Any], Any],
              expected: str, *, default: Any = _MISSING) -> Any:
        """``check(value)`` returns the converted value or raises ValueError/TypeError."""
        value = doc.get(key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                self.error(where, "missing", key)
            return default
        try:
            return check(value)
        except (TypeError, ValueError):
            self.error(where, f"expected {expected}, got {_show(value)}", key)
            return _MISSING

    def unknown(self, doc: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
        for key in doc:
            if key not in allowed:
                self.error(where, f"unknown field (allowed: {', '.join(allowed)})", str(key))


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _str(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise TypeError
    return v


def _any_str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError
    return v


def _pos_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise TypeError
    return v


def _nonneg_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise TypeError
    return v


def _pos_number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < float("inf"):
        raise TypeError
    return float(v)


def _udp_port(v: Any) -> int:
    if _pos_int(v) > 65535:
        raise ValueError
    return cast(int, v)


def _choice(*options: str, upper: bool = False) -> Callable[[Any], str]:
    def check(v: Any) -> str:
        if isinstance(v, bool) or not isinstance(v, str | int):
            raise TypeError
        s = str(v).upper() if upper else str(v)
        if s not in options:
            raise ValueError
        return s

    return check


def _one_of(*options: str) -> str:
    return "one of " + ", ".join(repr(o) for o in options)
