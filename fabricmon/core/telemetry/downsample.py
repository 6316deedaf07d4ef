"""Downsampling frames for the history (pure numpy; the database write is in ``services``)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from fabricmon.core.telemetry.frames import Frame


def downsample(frames: Sequence[Frame], *, end_ns: int, step_s: float) -> Frame:
    """Per-port mean of every metric over ``frames`` (same fabric and topology version), plus
    ``util_max``. NaN samples are ignored; a port with no sample at all stays NaN."""
    if not frames:
        raise ValueError("downsample needs at least one frame")
    first = frames[0]
    names = [m for m in first.metrics if all(m in f.metrics for f in frames)]
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns → NaN, which is the point
        for m in names:
            stack = np.stack([np.asarray(f.metrics[m], dtype=np.float32) for f in frames])
            out[m] = np.nanmean(stack, axis=0).astype(np.float32)
            if m == "util":
                out["util_max"] = np.nanmax(stack, axis=0).astype(np.float32)
    return Frame(first.fabric, first.topology_version, end_ns, step_s, out)
