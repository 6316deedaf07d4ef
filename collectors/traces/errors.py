"""The one error of the trace importers."""


class TraceFormatError(ValueError):
    """The file is not a readable trace of the kind asked for (the message says why)."""
