"""Switches, their ports, and the switch-to-switch cables."""

from __future__ import annotations

from django.db import models

from fabricmon.base.sealed import SealedField
from fabricmon.topology.models.fabric import Fabric


class Switch(models.Model):
    """A leaf or spine switch and how to reach it.

    On a rail-optimized fabric every leaf is a *rail-leaf*: NIC r of every server plugs into the
    leaf of rail r. Spines have no rail::

                 [spine0]      [spine1]
                 /      \\      /      \\
          [leaf-r0]    [leaf-r1]    ...          rail = 0, 1, …
           |  |  |      |  |  |
        node001/nic0  node001/nic1 …

    SNMP secrets (community, v3 keys) are stored here for the collectors, encrypted
    (:class:`~fabricmon.base.sealed.SealedField`; revealed only by ``services.snmp_settings``); they
    never appear in ``__str__``/``repr`` or logs, and the admin shows them masked and write-only.
    """

    class Role(models.TextChoices):
        LEAF = "leaf"
        SPINE = "spine"

    class Collector(models.TextChoices):
        SNMP = "snmp", "SNMP"
        GNMI = "gnmi", "gNMI"
        BOTH = "both", "SNMP + gNMI"

    class SnmpVersion(models.TextChoices):
        V2C = "2c", "v2c"
        V3 = "3", "v3 (USM)"

    fabric = models.ForeignKey(Fabric, on_delete=models.CASCADE, related_name="switches")
    name = models.CharField(max_length=100)
    role = models.CharField(max_length=5, choices=Role.choices)
    rail = models.PositiveSmallIntegerField(null=True, blank=True, help_text="leaves only")
    mgmt_address = models.CharField(max_length=255, help_text="host name or IP of the management agent")
    collector = models.CharField(max_length=4, choices=Collector.choices, default=Collector.SNMP)

    snmp_version = models.CharField(max_length=2, choices=SnmpVersion.choices, default=SnmpVersion.V2C)
    snmp_port = models.PositiveIntegerField(default=161)
    snmp_community = SealedField(max_length=255, blank=True, default="public")
    v3_user = models.CharField(max_length=100, blank=True, default="")
    v3_auth_protocol = models.CharField(max_length=8, default="SHA")
    v3_auth_key = SealedField(max_length=255, blank=True, default="")
    v3_priv_protocol = models.CharField(max_length=8, default="AES")
    v3_priv_key = SealedField(max_length=255, blank=True, default="")
    v3_context = models.CharField(max_length=100, blank=True, default="")
    interval_s = models.FloatField(default=1.0, help_text="poll interval")
    timeout_s = models.FloatField(default=0.3, help_text="timeout x (retries + 1) must be < interval")
    retries = models.PositiveSmallIntegerField(default=1)
    gnmi_port = models.PositiveIntegerField(
        null=True, blank=True, help_text="gNMI target port (empty: the switch has no gNMI target)"
    )
    gnmi_sample_interval_s = models.FloatField(default=1.0, help_text="gNMI SAMPLE interval")

    class Meta:
        ordering = ["fabric", "id"]
        verbose_name_plural = "switches"
        constraints = [
            models.UniqueConstraint(fields=["fabric", "name"], name="switch_name_unique_per_fabric")
        ]

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:  # Django's default repr uses __str__; say so explicitly: no secrets
        return f"<Switch {self.name} {self.role} rail={self.rail} snmp=v{self.snmp_version}>"


class Port(models.Model):
    """A switch interface (IF-MIB ifIndex) and its place in the fabric's port index.

    ``index`` is the row of this port in every frame of the fabric's current topology version:
    leaves by rail, host-facing ports before fabric-facing ones, then spines.
    ``peer`` is what the cable plugs into, for hover text (``node017 gpu3 mlx5_3`` or
    ``spine2:Ethernet9``).
    """

    class Facing(models.TextChoices):
        HOST = "host"
        FABRIC = "fabric"

    switch = models.ForeignKey(Switch, on_delete=models.CASCADE, related_name="ports")
    ifindex = models.PositiveIntegerField()
    name = models.CharField(max_length=100)
    speed_bps = models.BigIntegerField()
    facing = models.CharField(max_length=6, choices=Facing.choices)
    index = models.PositiveIntegerField(help_text="position in the fabric's port index")
    peer = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["index"]
        constraints = [
            models.UniqueConstraint(fields=["switch", "ifindex"], name="port_ifindex_unique_per_switch"),
            models.UniqueConstraint(fields=["switch", "name"], name="port_name_unique_per_switch"),
        ]
        indexes = [models.Index(fields=["index"], name="port_index_idx")]

    def __str__(self) -> str:
        return f"{self.switch.name}:{self.name}" if "switch" in self._state.fields_cache else self.name


class Link(models.Model):
    """A switch-to-switch cable::

        [leaf-r0:Ethernet33] ──── [spine0:Ethernet1]
              a                          b

    Each port is an end of at most one link (both ends are one-to-one).
    """

    fabric = models.ForeignKey(Fabric, on_delete=models.CASCADE, related_name="links")
    a = models.OneToOneField(Port, on_delete=models.CASCADE, related_name="link_as_a")
    b = models.OneToOneField(Port, on_delete=models.CASCADE, related_name="link_as_b")

    class Meta:
        ordering = ["fabric", "id"]

    def __str__(self) -> str:
        return f"link {self.a_id} ── {self.b_id}"
