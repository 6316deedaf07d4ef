"""A run's phases on the fabric: projection, attribution, clocks and the validation gates."""
