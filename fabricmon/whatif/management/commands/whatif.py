"""``manage.py whatif RUN [--param value …] [--export KIND]``: the What-if figures as JSON."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fabricmon.jobs.models import Run
from fabricmon.whatif import services
from fabricmon.whatif.params import FIELDS, ParamError, params_from


class Command(BaseCommand):
    help = "Print a run's What-if figures (hierarchy, optics, collectives, routing, placement) as JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", type=int)
        for name in FIELDS:
            parser.add_argument(f"--{name.replace('_', '-')}", dest=name, default="")
        parser.add_argument("--export", choices=services.EXPORTS, help="print a scheduler export instead")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            run = Run.objects.get(pk=opts["run"])
        except Run.DoesNotExist:
            raise CommandError(f"no run {opts['run']}") from None
        if opts["export"]:
            if not run.fabric:
                raise CommandError("the run names no fabric")
            self.stdout.write(services.exports(run.fabric, opts["export"])[1], ending="")
            return
        try:
            params = params_from({k: str(opts[k]) for k in FIELDS})
            data = services.run_whatif(run, params)
        except (ParamError, services.WhatIfError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(json.dumps(data, indent=1))
