"""``manage.py discover_switch FABRIC SWITCH [--apply] [--prune] [--all-types]``: walk a switch over
SNMP and show (or store) its ports by name — a dry-run diff unless ``--apply``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from collectors.snmp import SnmpPollError
from fabricmon.core.topology.spec import SnmpSettings, SwitchSpec
from fabricmon.topology.discovery import DiscoveryError, discover_switch
from fabricmon.topology.models import Fabric, Switch


class Command(BaseCommand):
    help = (
        "Walk a switch (sysName, sysDescr, ifTable/ifXTable, LLDP-MIB) and diff its ports, by name, "
        "against the topology; --apply stores them (a new topology version)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("fabric", help="fabric name")
        parser.add_argument("switch", help="switch name (stored SNMP settings; --address for a new one)")
        parser.add_argument("--apply", action="store_true", help="store the diff (default: dry run)")
        parser.add_argument(
            "--prune",
            action="store_true",
            help="with --apply: delete stored ports the switch no longer reports",
        )
        parser.add_argument(
            "--all-types",
            action="store_true",
            help="also propose loopback, VLAN, tunnel and other non-Ethernet interfaces",
        )
        new = parser.add_argument_group("a switch the fabric does not have yet (SNMP v2c)")
        new.add_argument("--address", help="its management address: walk it and add it")
        new.add_argument("--snmp-port", type=int, default=161)
        new.add_argument("--community", default="public")
        new.add_argument("--role", choices=("leaf", "spine"), default="leaf")
        new.add_argument("--rail", type=int, default=None, help="a leaf's rail")

    def handle(self, *args: Any, **options: Any) -> None:
        fabric, switch = options["fabric"], options["switch"]
        if options["prune"] and not options["apply"]:
            raise CommandError("--prune needs --apply")
        new = self._new(switch, options)
        try:
            diff = discover_switch(fabric, switch, apply=options["apply"], prune=options["prune"],
                                   all_types=options["all_types"], new=new)  # fmt: skip
        except Fabric.DoesNotExist:
            raise CommandError(f"no fabric {fabric!r}") from None
        except Switch.DoesNotExist:
            raise CommandError(f"fabric {fabric!r} has no switch {switch!r} (--address to add one)") from None
        except SnmpPollError as exc:
            raise CommandError(f"{switch}: SNMP walk failed: {exc}") from None
        except DiscoveryError as exc:
            raise CommandError(str(exc)) from None
        for line in diff.lines():
            self.stdout.write(line)

    @staticmethod
    def _new(name: str, options: dict[str, Any]) -> SwitchSpec | None:
        if not options["address"]:
            return None
        if options["role"] == "leaf" and options["rail"] is None:
            raise CommandError("a new leaf needs --rail")
        snmp = SnmpSettings(port=options["snmp_port"], community=options["community"])
        rail = options["rail"] if options["role"] == "leaf" else None
        return SwitchSpec(name=name, role=options["role"], rail=rail, mgmt_address=options["address"],
                          snmp=snmp, ports=())
