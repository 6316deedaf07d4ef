"""How a secret is shown where it must not be read: ``••••`` + its last 4 characters.

Pure text rules shared by the admin, the topology export and the topology loader (which must
recognise a masked value coming back from an export). Storage and encryption are
``fabricmon/base/sealed.py``.
"""

from __future__ import annotations

from urllib.parse import urlsplit

MASK = "••••"
# The last 4 characters are shown only of a secret at least this long (at most a third of it).
SHOW_TAIL_MIN_LEN = 12


def mask_text(plain: str) -> str:
    """``""`` when not set, ``••••`` + the last 4 when long enough, else ``••••``.

    A URL keeps its scheme and host (which service a chat hook goes to is no credential; the
    path and query that carry the token are masked), never its user:password part.
    """
    if not plain:
        return ""
    if len(plain) < SHOW_TAIL_MIN_LEN:
        return MASK
    if "://" in plain:
        try:
            parts = urlsplit(plain)
            port = f":{parts.port}" if parts.port else ""
        except ValueError:  # not a URL after all (a bad port): mask it whole
            return MASK + plain[-4:]
        return f"{parts.scheme}://{parts.hostname or ''}{port}/{MASK}{plain[-4:]}"
    return MASK + plain[-4:]


def shown_text(plain: str) -> str:
    """For pages: "not set", "set", or the :func:`mask_text` form with the last 4."""
    text = mask_text(plain)
    return "not set" if not text else ("set" if text == MASK else text)


def is_masked(text: str) -> bool:
    """A value that came out of :func:`mask_text` (e.g. an exported file) rather than a secret."""
    return text.startswith(MASK) or f"/{MASK}" in text
