from django.apps import AppConfig


class PhasesConfig(AppConfig):
    """The phase-aligned heatmap of a run: measured, projected and attributed, behind gates."""

    name = "fabricmon.phases"
    label = "phases"
