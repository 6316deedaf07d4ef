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

from dataclasses import replace

from fabricmon.core.topology.spec import (
    FabricSpec,
    GpuSpec,
    HostSpec,
    LinkSpec,
    PortSpec,
    SnmpSettings,
    SwitchSpec,
)


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
    speed_bps = speed_gbps * 1_000_000_000
    snmp = snmp or SnmpSettings()
    n_su = -(-servers // servers_per_su)
    rails = gpus_per_server
    # Servers of one SU on one leaf; the last SU may be partial.
    su_servers = [min(servers_per_su, servers - su * servers_per_su) for su in range(n_su)]
    uplinks = uplinks_per_leaf if uplinks_per_leaf is not None else max(su_servers)
    if spines and uplinks % spines:
        raise ValueError(f"uplinks_per_leaf={uplinks} does not divide evenly over {spines} spines")
    per_pair = uplinks // spines if spines else 0

    switches: list[SwitchSpec] = []
    links: list[LinkSpec] = []
    hosts: list[HostSpec] = []
    k = 0

    def leaf_name(su: int, rail: int) -> str:
        return f"leaf-su{su}-r{rail}" if n_su > 1 else f"leaf-r{rail}"

    spine_ports: dict[int, list[PortSpec]] = {s: [] for s in range(spines)}
    for su in range(n_su):
        for rail in range(rails):
            lname = leaf_name(su, rail)
            ports = [
                PortSpec(ifindex=i + 1, name=f"Ethernet{i + 1}", speed_bps=speed_bps, facing="host")
                for i in range(su_servers[su])
            ]
            for s in range(spines):
                for j in range(per_pair):
                    ifx = len(ports) + 1
                    ports.append(PortSpec(ifx, f"Ethernet{ifx}", speed_bps, "fabric"))
                    sp = spine_ports[s]
                    sp_ifx = len(sp) + 1
                    sp.append(PortSpec(sp_ifx, f"Ethernet{sp_ifx}", speed_bps, "fabric"))
                    links.append(LinkSpec(lname, f"Ethernet{ifx}", f"spine{s}", f"Ethernet{sp_ifx}"))
                    del j
            switches.append(
                SwitchSpec(
                    name=lname,
                    role="leaf",
                    rail=rail,
                    mgmt_address=mgmt_address,
                    snmp=replace(snmp, port=snmp_base_port + k),
                    ports=tuple(ports),
                )
            )
            k += 1
    for s in range(spines):
        switches.append(
            SwitchSpec(
                name=f"spine{s}",
                role="spine",
                rail=None,
                mgmt_address=mgmt_address,
                snmp=replace(snmp, port=snmp_base_port + k),
                ports=tuple(spine_ports[s]),
            )
        )
        k += 1

    width = max(3, len(str(servers)))
    for h in range(servers):
        su, local = divmod(h, servers_per_su)
        gpus = tuple(
            GpuSpec(
                index=g,
                nic=f"mlx5_{g}",
                rail=g,
                switch=leaf_name(su, g),
                port=f"Ethernet{local + 1}",
            )
            for g in range(gpus_per_server)
        )
        hosts.append(HostSpec(name=f"node{h + 1:0{width}d}", gpus=gpus))

    desc = (
        f"rail-optimized: {servers} servers x {gpus_per_server} GPUs, {n_su} SU, {rails} rails, "
        f"{spines} spines, {speed_gbps}G"
    )
    return FabricSpec(name=name, switches=tuple(switches), hosts=tuple(hosts), links=tuple(links), description=desc)
