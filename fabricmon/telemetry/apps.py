from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "fabricmon.telemetry"
    label = "telemetry"

    def ready(self) -> None:
        # Make fabricmon's Celery app the current one in every Django process (web, manage.py),
        # not only in workers: otherwise a task enqueued from a view or a command goes to
        # Celery's default app and its default broker, and is silently lost.
        # (fabricmon/__init__.py stays empty by design, so the import lives here.)
        import fabricmon.celery  # noqa: F401, PLC0415  (only once Django's app registry is ready)
