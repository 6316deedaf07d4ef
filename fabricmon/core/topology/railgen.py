"""Generate rail-optimized fabrics (the DGX SuperPOD pattern) as a :class:`FabricSpec`.

One scalable unit (SU) is ``servers_per_su`` servers; each rail r has one leaf per SU, and NIC r
of every server in the SU plugs into it. Leaves have as many uplinks as downlinks (1:1) unless
told otherwise, spread evenly over the spines as parallel links::

    spine0 … spine{S-1}
      ║ (uplinks_per_leaf / S parallel links per leaf–spine pair)
    leaf-su0-r0 … leaf-su0-r7   leaf-su1-r0 …
      │ one host-facing port per server
    node001 … node032           node033 …

Switch ``k`` (in generation order) gets SNMP port ``snmp_base_port + k`` so a whole fabric can be
served on one loopback address.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fabricmon.core.topology.spec import (
    FabricSpec,
    GpuSpec,
    HostSpec,
    LinkSpec,
    PortSpec,
    SnmpSettings,
    SwitchSpec,
)


@dataclass(frozen=True)
class _Plan:
    """The shape being generated: SUs, rails, spines and how leaves are cabled to spines."""

    servers: int
    gpus_per_server: int
    spines: int
    servers_per_su: int
    speed_bps: int
    su_servers: tuple[int, ...]  # servers in each SU (the last may be partial)
    per_pair: int  # parallel links per leaf–spine pair

    @property
    def n_su(self) -> int:
        return len(self.su_servers)

    def leaf_name(self, su: int, rail: int) -> str:
        return f"leaf-su{su}-r{rail}" if self.n_su > 1 else f"leaf-r{rail}"


def rail_optimized(
    name: str = "su1",
    *,
    servers: int = 32,
    gpus_per_server: int = 8,
    spines: int = 4,
    speed_gbps: int = 400,
    servers_per_su: int = 32,
    uplinks_per_leaf: int | None = None,
    mgmt_address: str = "127.0.0.1",
    snmp: SnmpSettings | None = None,
    snmp_base_port: int = 16100,
) -> FabricSpec:
    if servers < 1 or gpus_per_server < 1 or spines < 0:
        raise ValueError("servers and gpus_per_server must be ≥ 1, spines ≥ 0")
    n_su = -(-servers // servers_per_su)
    su_servers = tuple(min(servers_per_su, servers - su * servers_per_su) for su in range(n_su))
    uplinks = uplinks_per_leaf if uplinks_per_leaf is not None else max(su_servers)
    if spines and uplinks % spines:
        raise ValueError(f"uplinks_per_leaf={uplinks} does not divide evenly over {spines} spines")
    plan = _Plan(servers, gpus_per_server, spines, servers_per_su, speed_gbps * 1_000_000_000, su_servers,
                 uplinks // spines if spines else 0)
    snmp = snmp or SnmpSettings()
    leaves, spine_ports, links = _leaves(plan)
    switches = [
        SwitchSpec(name=n, role="leaf", rail=rail, mgmt_address=mgmt_address,
                   snmp=replace(snmp, port=snmp_base_port + k), ports=ports)
        for k, (n, rail, ports) in enumerate(leaves)
    ]
    switches += [
        SwitchSpec(name=f"spine{s}", role="spine", rail=None, mgmt_address=mgmt_address,
                   snmp=replace(snmp, port=snmp_base_port + len(leaves) + s), ports=tuple(spine_ports[s]))
        for s in range(spines)
    ]
    desc = (
        f"rail-optimized: {servers} servers x {gpus_per_server} GPUs, {n_su} SU, {gpus_per_server} rails, "
        f"{spines} spines, {speed_gbps}G"
    )
    return FabricSpec(name=name, switches=tuple(switches), hosts=_hosts(plan), links=tuple(links),
                      description=desc)


_Leaf = tuple[str, int, tuple[PortSpec, ...]]  # (name, rail, ports)


def _leaves(plan: _Plan) -> tuple[list[_Leaf], dict[int, list[PortSpec]], list[LinkSpec]]:
    """Leaves in generation order (SU by SU, rail by rail) with their ports: one host-facing port per
    server of the SU, then the uplinks, spread evenly over the spines as parallel links."""
    leaves: list[_Leaf] = []
    spine_ports: dict[int, list[PortSpec]] = {s: [] for s in range(plan.spines)}
    links: list[LinkSpec] = []
    speed = plan.speed_bps
    for su in range(plan.n_su):
        for rail in range(plan.gpus_per_server):
            lname = plan.leaf_name(su, rail)
            ports = [PortSpec(ifindex=i + 1, name=f"Ethernet{i + 1}", speed_bps=speed, facing="host")
                     for i in range(plan.su_servers[su])]
            for s in range(plan.spines):
                for _ in range(plan.per_pair):
                    ifx = len(ports) + 1
                    ports.append(PortSpec(ifx, f"Ethernet{ifx}", speed, "fabric"))
                    sp = spine_ports[s]
                    sp_ifx = len(sp) + 1
                    sp.append(PortSpec(sp_ifx, f"Ethernet{sp_ifx}", speed, "fabric"))
                    links.append(LinkSpec(lname, f"Ethernet{ifx}", f"spine{s}", f"Ethernet{sp_ifx}"))
            leaves.append((lname, rail, tuple(ports)))
    return leaves, spine_ports, links


def _hosts(plan: _Plan) -> tuple[HostSpec, ...]:
    """Servers numbered across SUs; GPU g's NIC on rail g's leaf of its SU, port = server's slot."""
    width = max(3, len(str(plan.servers)))
    hosts = []
    for h in range(plan.servers):
        su, local = divmod(h, plan.servers_per_su)
        gpus = tuple(
            GpuSpec(index=g, nic=f"mlx5_{g}", rail=g, switch=plan.leaf_name(su, g),
                    port=f"Ethernet{local + 1}")
            for g in range(plan.gpus_per_server)
        )
        hosts.append(HostSpec(name=f"node{h + 1:0{width}d}", gpus=gpus))
    return tuple(hosts)
