from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "fabricmon.jobs"
    label = "jobs"
