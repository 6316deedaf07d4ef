"""``manage.py check_rail_plan FABRIC [--lldp]``: list NICs not cabled to a leaf of their rail; exit 1
if any. Without ``--lldp`` the stored topology is checked; with it, what the switches report over
LLDP is compared with the topology (every NIC on a wrong rail leaf, every unexpected neighbour)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fabricmon.topology.cabling import check_cabling
from fabricmon.topology.models import Fabric
from fabricmon.topology.services import rail_plan_violations


class Command(BaseCommand):
    help = "Check that NIC r of every server is cabled to a leaf of rail r; exit 1 listing violations."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("fabric", help="fabric name")
        parser.add_argument("--lldp", action="store_true",
                            help="check the cabling the switches report over LLDP (SNMP or gNMI)")

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["fabric"]
        try:
            if options["lldp"]:
                self._lldp(name)
                return
            violations = rail_plan_violations(name)
        except Fabric.DoesNotExist:
            raise CommandError(f"no fabric {name!r}") from None
        if not violations:
            self.stdout.write(f"{name}: rail plan OK")
            return
        for v in violations:
            self.stdout.write(str(v))
        n = len(violations)
        raise CommandError(f"{name}: {n} NIC{'s' if n != 1 else ''} off the rail plan")

    def _lldp(self, name: str) -> None:
        check = check_cabling(name)
        for line in check.lines():
            self.stdout.write(line)
        n = len(check.report.violations)
        if n:
            raise CommandError(f"{name}: {n} cabling violation{'s' if n != 1 else ''} seen over LLDP")
