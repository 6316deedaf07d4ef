"""Serve the plotly.min.js that ships inside the ``plotly`` Python package as ``vendor/plotly.min.js``.

The dashboard must work with no internet, and a 4.6 MB vendored copy in git would drift from the
installed package; this finder makes the package's own file a static file (``collectstatic``
copies it like any other).

The pages are written for one plotly.js (``PLOTLY_JS_VERSION``): since plotly.js 3 a title must be an
object (``{text: …}``; a string is silently ignored) and only its own colour scale names exist (an
unknown one silently falls back). Another plotly package ships another plotly.js, so the finder's
system check fails ``manage.py check`` (and every server start) when the served file is not that
version, rather than letting charts lose their words.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import Error
from django.core.files.storage import FileSystemStorage

PREFIX = "vendor/"
FILES = ("plotly.min.js",)
PLOTLY_JS_VERSION = "4.1.1"  # what the pages are written for (pyproject pins plotly==7.1.0, which ships it)


def _package_data() -> Path:
    return Path(plotly.__file__).resolve().parent / "package_data"


def served_plotly_js_version() -> str | None:
    """The version in the served plotly.min.js's banner (``plotly.js v4.1.1``), None if unreadable."""
    try:
        with (_package_data() / "plotly.min.js").open("rb") as f:
            head = f.read(400).decode("ascii", errors="replace")
    except OSError:
        return None
    match = re.search(r"plotly\.js v(\d+\.\d+\.\d+)", head)
    return match.group(1) if match else None


class PlotlyFinder(BaseFinder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(_package_data()))
        self.storage.prefix = PREFIX.rstrip("/")  # type: ignore[attr-defined]

    def check(self, **kwargs: Any) -> list[Any]:
        served = served_plotly_js_version()
        if served == PLOTLY_JS_VERSION:
            return []
        return [Error(
            f"the plotly package serves plotly.js {served or 'of unknown version'}, the pages are "
            f"written for plotly.js {PLOTLY_JS_VERSION} (title objects, its colour scale names)",
            hint="install the plotly pinned in pyproject.toml, or update the pages and PLOTLY_JS_VERSION",
            id="fabricmon.E001",
        )]

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> str | list[str]:
        find_all = find_all or bool(kwargs.get("all"))
        if path.startswith(PREFIX) and path[len(PREFIX) :] in FILES:
            hit = str(_package_data() / path[len(PREFIX) :])
            return [hit] if find_all else hit
        return [] if find_all else ""

    def list(self, ignore_patterns: Any) -> Any:
        for name in FILES:
            yield name, self.storage
