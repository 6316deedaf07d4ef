from django.apps import AppConfig


class WhatIfConfig(AppConfig):
    """What a run's measurements mean for the next design: hierarchical dispatch, regional optics,
    collective algorithms, routing, placement and the scheduler's map — each figure gated."""

    name = "fabricmon.whatif"
    label = "whatif"
