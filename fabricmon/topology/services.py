"""Topology verbs: import a fabric, read it back as a spec, its port index, peers and rail plan.

Everything else in fabricmon reads the topology through these functions (or the core spec they
return), never by walking the ORM per port; the cached derived forms (port index, heatmap rows,
detection geometry, projection layout) are ``fabric_view.fabric_view(fabric)``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from django.db import transaction

from fabricmon.base.sealed import SecretValue, masked, reveal
from fabricmon.core.masking import is_masked
from fabricmon.core.topology.port_index import PortIndex, build_port_index
from fabricmon.core.topology.spec import (
    FabricSpec,
    GnmiSettings,
    GpuSpec,
    HostSpec,
    LinkSpec,
    PortSpec,
    SnmpSettings,
    SwitchSpec,
)
from fabricmon.core.topology.yaml_fields import TopologyError
from fabricmon.core.topology.yaml_load import check_fabric
from fabricmon.topology.models import Fabric, Gpu, Host, Link, Nic, Port, Switch, TopologyVersion


class FabricExistsError(ValueError):
    """``import_fabric(..., replace=False)`` for a name that is already taken."""


# How a spec read back from the database carries the SNMP secrets: decrypted (the collectors),
# masked (an export: ``••••`` + last 4), or left out as "" (every view that only draws the fabric).
Secrets = Literal["reveal", "mask", "omit"]
# spec field → Switch column
SECRET_COLUMNS = {"community": "snmp_community", "v3_auth_key": "v3_auth_key", "v3_priv_key": "v3_priv_key"}


@transaction.atomic
def import_fabric(spec: FabricSpec, *, replace: bool = True, validate: bool = True) -> Fabric:
    """Store ``spec`` in one transaction: all of it, or (on any error) nothing.

    Re-importing an existing name keeps the :class:`Fabric` row (and its version history and
    whatever other apps hang off it) and replaces everything below it. Records the port layout
    as a :class:`TopologyVersion` and numbers ``Port.index`` by ``build_port_index``.

    A masked secret (``••••abcd`` from an export) keeps the switch's stored secret if it matches
    that secret's mask; otherwise the import is refused (a :class:`TopologyError`), never stored.
    """
    if validate:  # the topology file's rules, for specs built in code (railgen, twin)
        check_fabric(spec)
    index = build_port_index(spec)
    fabric, created = Fabric.objects.select_for_update().get_or_create(
        name=spec.name, defaults={"description": spec.description}
    )
    collectors: dict[str, str] = {}
    stored: dict[str, dict[str, SecretValue]] = {}
    if not created:
        if not replace:
            raise FabricExistsError(f"fabric {spec.name!r} exists (use replace=True to re-import it)")
        stored = _stored_secrets(fabric)
        collectors = _clear(fabric)
    port_rows, port_id = _write_switches(fabric, spec, index, collectors, stored)
    _write_hosts(fabric, spec, port_id)
    fabric.description = spec.description
    fabric.topology_version = index.version
    fabric.save(update_fields=["description", "topology_version", "updated"])
    keys = [f"{index.switch_names[s]}:{ifx}"
            for s, ifx in zip(index.switch_of.tolist(), index.ifindex.tolist(), strict=True)]
    peer_list = [""] * len(index)
    for p in port_rows:
        peer_list[p.index] = p.peer
    TopologyVersion.objects.update_or_create(
        fabric=fabric, version=index.version, defaults={"port_keys": keys, "port_peers": peer_list}
    )
    return fabric


def _clear(fabric: Fabric) -> dict[str, str]:
    """Delete everything below a fabric that is re-imported; returns the collector choice per switch
    (set in the admin, not in the file: kept across re-imports)."""
    collectors = dict(Switch.objects.filter(fabric=fabric).values_list("name", "collector"))
    # Leaves of the tree first: each is then one DELETE with nothing left to cascade
    # (top-down, Django's collector would load every row to cascade and SET_NULL).
    Link.objects.filter(fabric=fabric).delete()
    Nic.objects.filter(gpu__host__fabric=fabric).delete()
    Gpu.objects.filter(host__fabric=fabric).delete()
    Host.objects.filter(fabric=fabric).delete()
    Port.objects.filter(switch__fabric=fabric).delete()
    Switch.objects.filter(fabric=fabric).delete()
    return collectors


def _stored_secrets(fabric: Fabric) -> dict[str, dict[str, SecretValue]]:
    """Switch name → its sealed secrets by column (still sealed: only compared, never shown)."""
    columns = tuple(SECRET_COLUMNS.values())
    return {
        name: dict(zip(columns, values, strict=True))
        for name, *values in Switch.objects.filter(fabric=fabric).values_list("name", *columns)
    }


def _secrets_of(sw: SwitchSpec, stored: Mapping[str, SecretValue]) -> dict[str, SecretValue]:
    """The switch's secret columns: the spec's values, a masked one resolved to the stored secret."""
    out: dict[str, SecretValue] = {}
    for attr, column in SECRET_COLUMNS.items():
        value: SecretValue = getattr(sw.snmp, attr)
        if isinstance(value, str) and is_masked(value):
            kept = stored.get(column, "")
            if not kept or masked(kept) != value:
                raise TopologyError([
                    f"switch {sw.name!r}: field {attr!r} is a masked value from an export ({value}) and this "
                    f"switch has no stored secret it stands for: give the secret itself or {attr}_env"
                ])
            value = kept
        out[column] = value
    return out


def _write_switches(
    fabric: Fabric, spec: FabricSpec, index: PortIndex, collectors: dict[str, str],
    stored: Mapping[str, Mapping[str, SecretValue]],
) -> tuple[list[Port], dict[tuple[str, str], int]]:
    """Switches, their ports (numbered by the port index, with their peers) and the links between
    them, in bulk. Returns the port rows and their ids by (switch, port name)."""
    switches = Switch.objects.bulk_create(
        [_switch_row(fabric, sw, collectors.get(sw.name, Switch.Collector.SNMP), stored.get(sw.name, {}))
         for sw in spec.switches]
    )
    switch_id = {sw.name: row.pk for sw, row in zip(spec.switches, switches, strict=True)}
    position = {
        (index.switch_names[s], int(ifx)): i
        for i, (s, ifx) in enumerate(zip(index.switch_of.tolist(), index.ifindex.tolist(), strict=True))
    }
    peers = _peer_labels(spec)
    port_rows = [
        Port(switch_id=switch_id[sw.name], ifindex=p.ifindex, name=p.name, speed_bps=p.speed_bps,
             facing=p.facing, index=position[sw.name, p.ifindex], peer=peers.get((sw.name, p.name), ""))
        for sw in spec.switches for p in sw.ports
    ]
    ports = iter(Port.objects.bulk_create(port_rows, batch_size=2000))
    port_id = {(sw.name, p.name): next(ports).pk for sw in spec.switches for p in sw.ports}
    Link.objects.bulk_create(
        [Link(fabric=fabric, a_id=port_id[ln.a_switch, ln.a_port], b_id=port_id[ln.b_switch, ln.b_port])
         for ln in spec.links],
        batch_size=2000,
    )
    return port_rows, port_id


def _write_hosts(fabric: Fabric, spec: FabricSpec, port_id: dict[tuple[str, str], int]) -> None:
    """Hosts, their GPUs and the GPUs' NICs cabled to switch ports, in bulk."""
    hosts = Host.objects.bulk_create([Host(fabric=fabric, name=h.name) for h in spec.hosts], batch_size=2000)
    gpu_rows = [Gpu(host_id=row.pk, index=g.index, rail=g.rail)
                for h, row in zip(spec.hosts, hosts, strict=True) for g in h.gpus]
    gpus = Gpu.objects.bulk_create(gpu_rows, batch_size=2000)
    all_gpus = [g for h in spec.hosts for g in h.gpus]
    Nic.objects.bulk_create(
        [Nic(gpu_id=row.pk, name=g.nic, rail=g.rail, port_id=port_id.get((g.switch, g.port)))
         for g, row in zip(all_gpus, gpus, strict=True)],
        batch_size=2000,
    )


def _switch_row(fabric: Fabric, sw: SwitchSpec, collector: str, stored: Mapping[str, SecretValue]) -> Switch:
    s = sw.snmp
    return Switch(
        fabric=fabric, name=sw.name, role=sw.role, rail=sw.rail, mgmt_address=sw.mgmt_address,
        collector=collector,
        snmp_version=s.version, snmp_port=s.port, v3_user=s.v3_user,
        v3_auth_protocol=s.v3_auth_protocol, v3_priv_protocol=s.v3_priv_protocol, v3_context=s.v3_context,
        **_secrets_of(sw, stored),
        interval_s=s.interval_s, timeout_s=s.timeout_s, retries=s.retries,
        gnmi_port=sw.gnmi.port if sw.gnmi is not None else None,
        gnmi_sample_interval_s=sw.gnmi.sample_interval_s if sw.gnmi is not None else 1.0,
    )


def _peer_labels(spec: FabricSpec) -> dict[tuple[str, str], str]:
    """(switch, port name) → what the other end of its cable is."""
    peers: dict[tuple[str, str], str] = {}
    for h in spec.hosts:
        for g in h.gpus:
            peers[g.switch, g.port] = f"{h.name} gpu{g.index} {g.nic}"
    for ln in spec.links:
        peers[ln.a_switch, ln.a_port] = f"{ln.b_switch}:{ln.b_port}"
        peers[ln.b_switch, ln.b_port] = f"{ln.a_switch}:{ln.a_port}"
    return peers


def _fabric(fabric: Fabric | str) -> Fabric:
    return fabric if isinstance(fabric, Fabric) else Fabric.objects.get(name=fabric)


def fabric_spec(fabric: Fabric | str, *, secrets: Secrets = "reveal") -> FabricSpec:
    """The stored fabric as a core :class:`FabricSpec` (SNMP settings included), in import order.

    ``secrets``: decrypted for the collectors (the default, what the spec always held), ``"mask"``
    for an export, ``"omit"`` where nothing reads them (views, shard planning). Six queries
    whatever the fabric's size.
    """
    fabric = _fabric(fabric)
    switches = list(Switch.objects.filter(fabric=fabric).order_by("id"))
    ports_of: dict[int, list[PortSpec]] = defaultdict(list)
    port_key: dict[int, tuple[str, str]] = {}
    names = {sw.pk: sw.name for sw in switches}
    for pk, sw_id, ifx, name, speed, facing in (
        Port.objects.filter(switch__fabric=fabric).order_by("id")
        .values_list("id", "switch_id", "ifindex", "name", "speed_bps", "facing")
    ):
        ports_of[sw_id].append(PortSpec(ifindex=ifx, name=name, speed_bps=speed, facing=facing))
        port_key[pk] = (names[sw_id], name)
    gpus_of: dict[int, list[GpuSpec]] = defaultdict(list)
    for host_id, index, nic, rail, port_id in (
        Nic.objects.filter(gpu__host__fabric=fabric).order_by("gpu_id", "id")
        .values_list("gpu__host_id", "gpu__index", "name", "rail", "port_id")
    ):
        sw, port = port_key.get(port_id, ("", "")) if port_id is not None else ("", "")
        gpus_of[host_id].append(GpuSpec(index=index, nic=nic, rail=rail, switch=sw, port=port))
    hosts = tuple(
        HostSpec(name=name, gpus=tuple(gpus_of[pk]))
        for pk, name in Host.objects.filter(fabric=fabric).order_by("id").values_list("id", "name")
    )
    links = []
    for a_id, b_id in Link.objects.filter(fabric=fabric).order_by("id").values_list("a_id", "b_id"):
        (a_sw, a_port), (b_sw, b_port) = port_key[a_id], port_key[b_id]
        links.append(LinkSpec(a_switch=a_sw, a_port=a_port, b_switch=b_sw, b_port=b_port))
    return FabricSpec(
        name=fabric.name,
        description=fabric.description,
        switches=tuple(
            SwitchSpec(name=sw.name, role=sw.role, rail=sw.rail, mgmt_address=sw.mgmt_address,
                       snmp=snmp_settings(sw, secrets=secrets), ports=tuple(ports_of[sw.pk]),
                       gnmi=gnmi_settings(sw))
            for sw in switches
        ),
        hosts=hosts,
        links=tuple(links),
    )


def snmp_settings(switch: Switch, *, secrets: Secrets = "reveal") -> SnmpSettings:
    """The collector's view of one switch's SNMP settings: the one place its secrets are decrypted."""
    show = {"reveal": reveal, "mask": masked, "omit": lambda _v: ""}[secrets]
    return SnmpSettings(
        version=switch.snmp_version,
        port=switch.snmp_port, community=show(switch.snmp_community), v3_user=switch.v3_user,
        v3_auth_protocol=switch.v3_auth_protocol, v3_auth_key=show(switch.v3_auth_key),
        v3_priv_protocol=switch.v3_priv_protocol, v3_priv_key=show(switch.v3_priv_key),
        v3_context=switch.v3_context, interval_s=switch.interval_s, timeout_s=switch.timeout_s,
        retries=switch.retries,
    )


def gnmi_settings(switch: Switch) -> GnmiSettings | None:
    """The switch's gNMI target, or None when it has none."""
    if switch.gnmi_port is None:
        return None
    return GnmiSettings(port=switch.gnmi_port, sample_interval_s=switch.gnmi_sample_interval_s)


def set_gnmi_collector(fabric: Fabric | str, choice: str) -> int:
    """Collect every switch of ``fabric`` that has a gNMI target by ``choice`` (snmp | gnmi | both);
    switches without one stay on SNMP. Returns how many switches were set."""
    if choice not in Switch.Collector.values:
        raise ValueError(f"collector must be one of {', '.join(Switch.Collector.values)}, got {choice!r}")
    fabric = _fabric(fabric)
    return int(Switch.objects.filter(fabric=fabric, gnmi_port__isnull=False).update(collector=choice))


def collector_protocols(fabric: Fabric | str) -> dict[str, str]:
    """Switch name → how to collect it (``"snmp"``, ``"gnmi"`` or ``"both"``); set in the admin,
    not part of the core spec or the topology file. One query."""
    fabric = _fabric(fabric)
    return dict(Switch.objects.filter(fabric=fabric).order_by("id").values_list("name", "collector"))


def port_peers(fabric: Fabric | str) -> list[str]:
    """Per port index position, what the port faces: ``"node017 gpu3 mlx5_3"`` for a host-facing
    port, ``"spine2:Ethernet9"`` for a fabric-facing one, ``""`` when nothing is cabled.

    Computed from the current NICs and links (so admin edits show), in three queries.
    """
    fabric = _fabric(fabric)
    rows = list(Port.objects.filter(switch__fabric=fabric).order_by("index")
                .values_list("id", "index", "switch__name", "name"))
    name_of = {pk: f"{sw}:{name}" for pk, _, sw, name in rows}
    peer: dict[int, str] = {}
    for port_id, host, gpu, nic in (
        Nic.objects.filter(gpu__host__fabric=fabric, port__isnull=False)
        .values_list("port_id", "gpu__host__name", "gpu__index", "name")
    ):
        peer[port_id] = f"{host} gpu{gpu} {nic}"
    for a_id, b_id in Link.objects.filter(fabric=fabric).values_list("a_id", "b_id"):
        peer[a_id], peer[b_id] = name_of.get(b_id, ""), name_of.get(a_id, "")
    out = [""] * len(rows)
    for pk, index, _, _ in rows:
        out[index] = peer.get(pk, "")
    return out


@dataclass(frozen=True)
class RailPlanViolation:
    """A NIC not cabled to a leaf of its rail (``switch`` is ``""`` when it is not cabled at all)."""

    host: str
    gpu: int
    nic: str
    rail: int
    switch: str
    port: str
    switch_rail: int | None

    def __str__(self) -> str:
        if not self.switch:
            return f"{self.host} gpu{self.gpu} {self.nic}: rail {self.rail}, not cabled to any switch port"
        found = f"rail {self.switch_rail}" if self.switch_rail is not None else "no rail (a spine)"
        return (f"{self.host} gpu{self.gpu} {self.nic}: rail {self.rail}, cabled to "
                f"{self.switch}:{self.port} which serves {found}; expected a leaf of rail {self.rail}")


def rail_plan_violations(fabric: Fabric | str) -> list[RailPlanViolation]:
    """NICs whose cable does not end on a leaf of their rail, in host/GPU order (one query)."""
    fabric = _fabric(fabric)
    out = []
    for host, gpu, nic, rail, sw, role, sw_rail, port in (
        Nic.objects.filter(gpu__host__fabric=fabric).order_by("gpu__host_id", "gpu__index", "id")
        .values_list("gpu__host__name", "gpu__index", "name", "rail", "port__switch__name",
                     "port__switch__role", "port__switch__rail", "port__name")
    ):
        if sw is not None and role == Switch.Role.LEAF and sw_rail == rail:
            continue
        out.append(RailPlanViolation(host=host, gpu=gpu, nic=nic, rail=rail, switch=sw or "",
                                     port=port or "", switch_rail=sw_rail))
    return out
