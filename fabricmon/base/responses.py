"""JSON answers too big for the standard library's encoder to be quick (a phase view is about
100k values): orjson writes them about 10× faster. NaN and ±inf become ``null`` (never invalid
JSON), numpy scalars and arrays are written as their values."""

from __future__ import annotations

from typing import Any

import orjson
from django.http import HttpResponse

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def json_response(data: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(orjson.dumps(data, option=_OPTIONS), status=status, content_type="application/json")
