"""``manage.py load_topology FILE``: import a topology file, all or nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from fabricmon.core.topology.yaml_fields import TopologyError
from fabricmon.core.topology.yaml_load import load_fabric
from fabricmon.topology.services import FabricExistsError, import_fabric, set_gnmi_collector


class Command(BaseCommand):
    help = "Import a fabric from a topology YAML file (docs/topology-format.md); nothing is stored on error."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="topology YAML file ('-' reads stdin)")
        parser.add_argument("--no-replace", action="store_true",
                            help="fail if a fabric of that name exists instead of replacing it")
        parser.add_argument("--collector", choices=("snmp", "gnmi", "both"),
                            help="collect every switch that has a gNMI target this way (default: keep the "
                                 "admin's choice; new switches snmp). both = gNMI, SNMP while it is down")

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["file"]
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{path}: cannot read: {exc}") from None
        source = "<stdin>" if path == "-" else path
        try:
            spec = load_fabric(text, source=source)
            fabric = import_fabric(spec, replace=not options["no_replace"], validate=False)
            if options["collector"]:
                set_gnmi_collector(fabric, options["collector"])
        except (TopologyError, FabricExistsError) as exc:
            raise CommandError(str(exc)) from None
        except DatabaseError as exc:
            raise CommandError(f"{source}: the database refused the fabric, nothing stored: {exc}") from None
        n_ports = sum(len(sw.ports) for sw in spec.switches)
        n_gpus = sum(len(h.gpus) for h in spec.hosts)
        self.stdout.write(
            f"loaded fabric {fabric.name!r}: {len(spec.switches)} switches, {n_ports} ports, "
            f"{len(spec.hosts)} hosts, {n_gpus} GPUs, {len(spec.links)} links; "
            f"topology version {fabric.topology_version}"
        )
