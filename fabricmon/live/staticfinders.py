"""Serve the plotly.min.js that ships inside the ``plotly`` Python package as ``vendor/plotly.min.js``.

The dashboard must work with no internet, and a 4.6 MB vendored copy in git would drift from the
installed package; this finder makes the package's own file a static file (``collectstatic``
copies it like any other).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PREFIX = "vendor/"
FILES = ("plotly.min.js",)


def _package_data() -> Path:
    return Path(plotly.__file__).resolve().parent / "package_data"


class PlotlyFinder(BaseFinder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(_package_data()))
        self.storage.prefix = PREFIX.rstrip("/")  # type: ignore[attr-defined]

    def check(self, **kwargs: Any) -> list[Any]:
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> str | list[str]:
        find_all = find_all or bool(kwargs.get("all"))
        if path.startswith(PREFIX) and path[len(PREFIX) :] in FILES:
            hit = str(_package_data() / path[len(PREFIX) :])
            return [hit] if find_all else hit
        return [] if find_all else ""

    def list(self, ignore_patterns: Any) -> Any:
        for name in FILES:
            yield name, self.storage
