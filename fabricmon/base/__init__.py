"""What every app stands on: Redis keys and connections, the socket broadcaster, the access model.

Imports no app of fabricmon (the layer contract in pyproject.toml holds it there)."""
