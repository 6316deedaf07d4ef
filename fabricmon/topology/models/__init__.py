"""The topology as rows: a fabric, its switches and ports, the cables between them, and the hosts,
GPUs and NICs that hang off the rail-leaves. ``fabricmon.core.topology`` holds the same data as
frozen dataclasses; ``services.fabric_spec`` / ``services.import_fabric`` convert both ways."""

from fabricmon.topology.models.fabric import Fabric, TopologyVersion
from fabricmon.topology.models.hosts import Gpu, Host, Nic
from fabricmon.topology.models.switches import Link, Port, Switch

__all__ = ["Fabric", "Gpu", "Host", "Link", "Nic", "Port", "Switch", "TopologyVersion"]
