from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "fabricmon.telemetry"
    label = "telemetry"
