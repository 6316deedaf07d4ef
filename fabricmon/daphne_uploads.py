"""Daphne serves uploads without Twisted parsing them first.

Twisted's ``http.Request`` parses every multipart/form-data body into ``request.args`` with the
``email`` parser before Daphne hands the body to the application — the whole body read into
memory and copied several times (a 40 MB trace upload: +480 MB of peak RSS in the web process,
even when the upload is then only saved for the worker). Daphne never reads ``args`` (it passes
the raw body on as ASGI messages; Django parses it streaming, to disk past
``FILE_UPLOAD_MAX_MEMORY_SIZE``), so the parse is pure cost. Twisted exposes the switch as the
request's ``parsePOSTFormSubmission`` (``_parsePOSTFormSubmission`` on the instance); Daphne
gives no way to pass it, so its request class is told here, once, when the ASGI app loads.
See twisted/twisted#5511.
"""

from __future__ import annotations

from typing import Any


def stop_twisted_form_parsing() -> bool:
    """Turn Twisted's form parsing off for Daphne's requests; False when not under Daphne."""
    try:
        from daphne.http_protocol import WebRequest  # noqa: PLC0415 - only where Daphne serves
    except ImportError:
        return False
    if getattr(WebRequest, "_fabricmon_no_form_parse", False):
        return True
    original = WebRequest.__init__

    def init_without_form_parse(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._parsePOSTFormSubmission = False

    WebRequest.__init__ = init_without_form_parse  # type: ignore[method-assign]
    WebRequest._fabricmon_no_form_parse = True  # type: ignore[attr-defined]
    return True
