"""``manage.py export_topology FABRIC [-o FILE]``: write a stored fabric as a topology file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fabricmon.core.topology.yaml_dump import dump_fabric
from fabricmon.topology.models import Fabric
from fabricmon.topology.services import fabric_spec


class Command(BaseCommand):
    help = "Write a fabric as topology YAML (v3 secrets are written inline: treat the file as a secret)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("fabric", help="fabric name")
        parser.add_argument("-o", "--output", help="file to write (default: stdout)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            text = dump_fabric(fabric_spec(options["fabric"]))
        except Fabric.DoesNotExist:
            known = ", ".join(Fabric.objects.values_list("name", flat=True)) or "none"
            raise CommandError(f"no fabric {options['fabric']!r} (known: {known})") from None
        if options["output"]:
            Path(options["output"]).write_text(text, encoding="utf-8")
        else:
            self.stdout.write(text, ending="")
