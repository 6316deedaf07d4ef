from django.apps import AppConfig


class TopologyConfig(AppConfig):
    name = "fabricmon.topology"
    label = "topology"
