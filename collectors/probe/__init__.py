"""fabricmon's training-side probe (``pip install fabricmon[probe]``): no Django, torch imported
lazily, HTTP via the stdlib. See ``probe.A2AProbe`` and ``poster.EventPoster``."""

from collectors.probe.client import Answer, IngestClient, measure_clock_offset
from collectors.probe.matrix import events_from_matrix
from collectors.probe.poster import EventPoster, PosterStats
from collectors.probe.probe import A2AProbe

__all__ = [
    "A2AProbe",
    "Answer",
    "EventPoster",
    "IngestClient",
    "PosterStats",
    "events_from_matrix",
    "measure_clock_offset",
]
