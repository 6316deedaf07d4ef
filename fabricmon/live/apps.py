from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "fabricmon.live"
    label = "live"
