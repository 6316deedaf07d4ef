"""Incast and moving-incast detection over frames, and the pure alert lifecycle."""
