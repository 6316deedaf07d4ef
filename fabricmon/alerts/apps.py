from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "fabricmon.alerts"
    label = "alerts"
    verbose_name = "Alerts"
