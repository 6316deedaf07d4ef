"""Pure Python + numpy: no Django, Celery or Channels imports (enforced by tests/core/test_layering.py)."""
