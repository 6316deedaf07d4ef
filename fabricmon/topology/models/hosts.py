"""Servers, their GPUs, and the NICs that cable each GPU to its rail-leaf."""

from __future__ import annotations

from django.db import models

from fabricmon.topology.models.fabric import Fabric
from fabricmon.topology.models.switches import Port


class Host(models.Model):
    """A GPU server of the fabric (``node017``)."""

    fabric = models.ForeignKey(Fabric, on_delete=models.CASCADE, related_name="hosts")
    name = models.CharField(max_length=100)

    class Meta:
        ordering = ["fabric", "id"]
        constraints = [models.UniqueConstraint(fields=["fabric", "name"], name="host_name_unique_per_fabric")]

    def __str__(self) -> str:
        return self.name


class Gpu(models.Model):
    """GPU ``index`` of a host; it belongs to ``rail`` (on a rail-optimized fabric: rail = index)."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    rail = models.PositiveSmallIntegerField()

    class Meta:
        verbose_name = "GPU"
        ordering = ["host", "index"]
        constraints = [models.UniqueConstraint(fields=["host", "index"], name="gpu_index_unique_per_host")]

    def __str__(self) -> str:
        return f"gpu{self.index}"


class Nic(models.Model):
    """The NIC serving a GPU, and the switch port its cable plugs into::

        node017 ─ gpu3 ─ mlx5_3 ════ [leaf-r3:Ethernet17]

    The rail plan says ``port`` is on the leaf of the NIC's ``rail``; a NIC cabled elsewhere is
    stored as found and reported by ``check_rail_plan`` (``services.rail_plan_violations``).
    """

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="nics")
    name = models.CharField(max_length=50)
    rail = models.PositiveSmallIntegerField()
    port = models.OneToOneField(
        Port, on_delete=models.SET_NULL, null=True, blank=True, related_name="nic",
        help_text="the switch port this NIC is cabled to",
    )

    class Meta:
        ordering = ["gpu", "id"]
        verbose_name = "NIC"

    def __str__(self) -> str:
        return self.name
