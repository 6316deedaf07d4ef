"""Pure Python + numpy, no Django, Celery or Channels (the contracts in pyproject.toml, checked by
tests/test_layers.py): topology, telemetry maths, detection and a run's phases on the fabric."""
