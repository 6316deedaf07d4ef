"""A fabric and the history of its port layouts."""

from __future__ import annotations

from django.db import models


class Fabric(models.Model):
    """One monitored network fabric (e.g. a scalable unit of a training cluster).

    Its switches, ports, cables, hosts, GPUs and NICs hang off it; ``topology_version`` names the
    current port index (``core.topology.port_index.build_port_index``) — the order every frame's arrays
    follow. Re-importing a fabric keeps this row (so telemetry, jobs and version history that
    point at it survive) and replaces everything below it.
    """

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True, default="")
    topology_version = models.CharField(
        max_length=40, blank=True, default="", help_text="hash of the current port index order"
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TopologyVersion(models.Model):
    """A port layout this fabric has had, kept after re-cabling so old frames stay readable.

    A frame carries the version it was indexed against; ``port_keys[i]`` is ``"switch:ifindex"``
    of row ``i`` of that frame, and ``port_peers[i]`` what was plugged into it then::

        frame(version=3f2a…) ──▶ TopologyVersion(3f2a…).port_keys = ["leaf-r0:1", "leaf-r0:2", …]
    """

    fabric = models.ForeignKey(Fabric, on_delete=models.CASCADE, related_name="versions")
    version = models.CharField(max_length=40)
    port_keys = models.JSONField(default=list, help_text='"switch:ifindex" per port, in index order')
    port_peers = models.JSONField(default=list, help_text="what each port faced, in index order")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["fabric", "-created"]
        constraints = [
            models.UniqueConstraint(fields=["fabric", "version"], name="topology_version_unique_per_fabric")
        ]

    def __str__(self) -> str:
        return f"{self.version} ({len(self.port_keys)} ports)"
