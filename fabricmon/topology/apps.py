from django.apps import AppConfig


class TopologyConfig(AppConfig):
    name = "fabricmon.topology"
    label = "topology"

    def ready(self) -> None:
        # the project's deploy checks live in base (no app of their own); every process loads topology
        from fabricmon.base import checks  # noqa: F401, PLC0415
