"""Counters to rates to frames: the maths of telemetry, vectorized over ports."""
