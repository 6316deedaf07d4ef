"""``manage.py generate_topology``: a rail-optimized fabric (``core.topology.railgen``) as topology YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.core.topology.yaml_dump import dump_fabric


class Command(BaseCommand):
    help = "Generate a rail-optimized fabric (one leaf per rail per SU, spines above) as topology YAML."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default="su1", help="fabric name (default su1)")
        parser.add_argument("--servers", type=int, default=32)
        parser.add_argument("--gpus-per-server", type=int, default=8, help="= NICs per server = rails")
        parser.add_argument("--spines", type=int, default=4)
        parser.add_argument("--speed-gbps", type=int, default=400)
        parser.add_argument("--servers-per-su", type=int, default=32)
        parser.add_argument("--mgmt-address", default="127.0.0.1")
        parser.add_argument("--snmp-base-port", type=int, default=16100,
                            help="switch k answers SNMP on this port + k")
        parser.add_argument("-o", "--output", help="file to write (default: stdout)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            spec = rail_optimized(
                options["name"], servers=options["servers"], gpus_per_server=options["gpus_per_server"],
                spines=options["spines"], speed_gbps=options["speed_gbps"],
                servers_per_su=options["servers_per_su"], mgmt_address=options["mgmt_address"],
                snmp_base_port=options["snmp_base_port"],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        text = dump_fabric(spec)
        if options["output"]:
            Path(options["output"]).write_text(text, encoding="utf-8")
        else:
            self.stdout.write(text, ending="")
