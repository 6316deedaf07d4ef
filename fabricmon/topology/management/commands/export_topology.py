"""``manage.py export_topology FABRIC [-o FILE] [--with-secrets]``: write a stored fabric as a
topology file. SNMP secrets are masked (``••••`` + the last 4): loading the file back keeps the
stored secrets of the switches it names. ``--with-secrets`` writes them in clear for a backup or a
move to another install, and creates ``FILE`` owner-only (0600)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fabricmon.core.topology.yaml_dump import dump_fabric
from fabricmon.topology.models import Fabric
from fabricmon.topology.services import fabric_spec


class Command(BaseCommand):
    help = ("Write a fabric as topology YAML, SNMP secrets masked (--with-secrets: in clear, "
            "and the file owner-only).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("fabric", help="fabric name")
        parser.add_argument("-o", "--output", help="file to write (default: stdout)")
        parser.add_argument("--with-secrets", action="store_true",
                            help="write SNMP communities and v3 keys in clear (treat the file as a secret)")

    def handle(self, *args: Any, **options: Any) -> None:
        secrets = "reveal" if options["with_secrets"] else "mask"
        try:
            text = dump_fabric(fabric_spec(options["fabric"], secrets=secrets))
        except Fabric.DoesNotExist:
            known = ", ".join(Fabric.objects.values_list("name", flat=True)) or "none"
            raise CommandError(f"no fabric {options['fabric']!r} (known: {known})") from None
        if options["output"]:
            write(Path(options["output"]), text, owner_only=options["with_secrets"])
        else:
            self.stdout.write(text, ending="")


def write(path: Path, text: str, *, owner_only: bool) -> None:
    """Write ``text``; with ``owner_only`` the file is 0600 from its creation (never readable by others
    meanwhile), also when it replaces a wider file."""
    if not owner_only:
        path.write_text(text, encoding="utf-8")
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
