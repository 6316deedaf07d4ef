"""``manage.py check_rail_plan FABRIC``: list NICs not cabled to a leaf of their rail; exit 1 if any."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fabricmon.topology.models import Fabric
from fabricmon.topology.services import rail_plan_violations


class Command(BaseCommand):
    help = "Check that NIC r of every server is cabled to a leaf of rail r; exit 1 listing violations."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("fabric", help="fabric name")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            violations = rail_plan_violations(options["fabric"])
        except Fabric.DoesNotExist:
            raise CommandError(f"no fabric {options['fabric']!r}") from None
        if not violations:
            self.stdout.write(f"{options['fabric']}: rail plan OK")
            return
        for v in violations:
            self.stdout.write(str(v))
        n = len(violations)
        raise CommandError(f"{options['fabric']}: {n} NIC{'s' if n != 1 else ''} off the rail plan")
