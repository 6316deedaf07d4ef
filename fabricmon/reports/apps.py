from django.apps import AppConfig


class ReportsConfig(AppConfig):
    """A run's shareable report (one self-contained HTML file), its per-port bytes as CSV and
    Parquet, and two runs side by side: read from jobs, phases and alerts, owned by none of them."""

    name = "fabricmon.reports"
    label = "reports"
