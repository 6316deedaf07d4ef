"""Admin for the topology. SNMP secrets are write-only: the form never renders them (it says
"set" or ``••••`` + the last 4), and an empty field on save keeps the stored value (type a new
value to change it, tick "clear" to empty it)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe

from collectors.snmp import SnmpPollError
from fabricmon.base.sealed import shown
from fabricmon.topology.discovery import DiscoveryError, discover_switch
from fabricmon.topology.models import Fabric, Gpu, Host, Link, Nic, Port, Switch, TopologyVersion

SECRET_FIELDS = ("snmp_community", "v3_auth_key", "v3_priv_key")


class SwitchForm(forms.ModelForm):
    """Secrets as password inputs that never echo the stored value."""

    clear_snmp_community = forms.BooleanField(required=False, label="clear community")
    clear_v3_auth_key = forms.BooleanField(required=False, label="clear v3 auth key")
    clear_v3_priv_key = forms.BooleanField(required=False, label="clear v3 priv key")

    class Meta:
        model = Switch
        fields = (
            "fabric", "name", "role", "rail", "mgmt_address", "collector", "snmp_version", "snmp_port",
            "snmp_community", "interval_s", "timeout_s", "retries", "v3_user", "v3_auth_protocol",
            "v3_auth_key", "v3_priv_protocol", "v3_priv_key", "v3_context", "gnmi_port",
            "gnmi_sample_interval_s",
        )
        widgets = {f: forms.PasswordInput(render_value=False) for f in SECRET_FIELDS}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in SECRET_FIELDS:
            field = self.fields[name]
            field.required = False
            stored = getattr(self.instance, name, "") if self.instance.pk else ""
            field.help_text = f"stored: {shown(stored)}; leave empty to keep it" if stored else "not set"

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name in SECRET_FIELDS:
            if data.get(f"clear_{name}"):
                data[name] = ""
            elif not data.get(name) and self.instance.pk:
                data[name] = getattr(self.instance, name)
        return data


class PortInline(admin.TabularInline):
    model = Port
    extra = 0
    fields = ("index", "ifindex", "name", "speed_bps", "facing", "peer")
    readonly_fields = ("index", "peer")
    show_change_link = True


@admin.register(Fabric)
class FabricAdmin(admin.ModelAdmin):
    list_display = ("name", "description", "topology_version", "switch_count", "updated")
    search_fields = ("name", "description")
    readonly_fields = ("topology_version", "created", "updated")

    @admin.display(description="switches")
    def switch_count(self, obj: Fabric) -> int:
        return obj.switches.count()


@admin.register(TopologyVersion)
class TopologyVersionAdmin(admin.ModelAdmin):
    list_display = ("version", "fabric", "port_count", "created")
    list_filter = ("fabric",)
    search_fields = ("version", "fabric__name")
    readonly_fields = ("fabric", "version", "port_keys", "port_peers", "created")

    @admin.display(description="ports")
    def port_count(self, obj: TopologyVersion) -> int:
        return len(obj.port_keys)


@admin.register(Switch)
class SwitchAdmin(admin.ModelAdmin):
    form = SwitchForm
    list_display = ("name", "fabric", "role", "rail", "mgmt_address", "collector", "snmp_version",
                    "snmp_port", "interval_s")
    list_filter = ("fabric", "role", "rail", "collector", "snmp_version")
    search_fields = ("name", "mgmt_address")
    list_select_related = ("fabric",)
    inlines = [PortInline]
    actions = ("discover_ports", "discover_and_apply")
    fieldsets = (
        (None, {"fields": ("fabric", "name", "role", "rail", "mgmt_address", "collector")}),
        ("SNMP", {"fields": ("snmp_version", "snmp_port", "snmp_community", "clear_snmp_community",
                             "interval_s", "timeout_s", "retries")}),
        ("SNMP v3 (USM)", {"fields": ("v3_user", "v3_auth_protocol", "v3_auth_key", "clear_v3_auth_key",
                                      "v3_priv_protocol", "v3_priv_key", "clear_v3_priv_key",
                                      "v3_context")}),
        ("gNMI", {"fields": ("gnmi_port", "gnmi_sample_interval_s")}),
    )

    @admin.action(description="Discover ports over SNMP (dry run: show the diff)")
    def discover_ports(self, request: HttpRequest, queryset: QuerySet[Switch]) -> None:
        self._discover(request, queryset, apply=False)

    @admin.action(description="Discover ports over SNMP and apply them to the topology")
    def discover_and_apply(self, request: HttpRequest, queryset: QuerySet[Switch]) -> None:
        self._discover(request, queryset, apply=True)

    def _discover(self, request: HttpRequest, queryset: QuerySet[Switch], *, apply: bool) -> None:
        """One message per switch: its diff (``manage.py discover_switch``'s lines) or why not."""
        for sw in queryset.select_related("fabric").order_by("fabric__name", "name"):
            try:
                diff = discover_switch(sw.fabric, sw.name, apply=apply)
            except (SnmpPollError, DiscoveryError) as exc:
                self.message_user(request, f"{sw.fabric.name}/{sw.name}: {exc}", messages.ERROR)
                continue
            text = format_html_join(mark_safe("<br>"), "{}", ((line,) for line in diff.lines()))
            self.message_user(request, text, messages.SUCCESS if apply else messages.INFO)


@admin.register(Port)
class PortAdmin(admin.ModelAdmin):
    list_display = ("__str__", "index", "ifindex", "speed_bps", "facing", "peer", "fabric_name")
    list_filter = ("switch__fabric", "facing", "switch__role", "switch__rail")
    search_fields = ("name", "switch__name", "peer")
    list_select_related = ("switch", "switch__fabric")
    readonly_fields = ("index",)

    @admin.display(description="fabric", ordering="switch__fabric__name")
    def fabric_name(self, obj: Port) -> str:
        return obj.switch.fabric.name


@admin.register(Link)
class LinkAdmin(admin.ModelAdmin):
    list_display = ("id", "fabric", "a_end", "b_end")
    list_filter = ("fabric",)
    search_fields = ("a__switch__name", "a__name", "b__switch__name", "b__name")
    raw_id_fields = ("a", "b")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Link]:
        return super().get_queryset(request).select_related("fabric", "a__switch", "b__switch")

    @admin.display(description="a")
    def a_end(self, obj: Link) -> str:
        return f"{obj.a.switch.name}:{obj.a.name}"

    @admin.display(description="b")
    def b_end(self, obj: Link) -> str:
        return f"{obj.b.switch.name}:{obj.b.name}"


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ("name", "fabric")
    list_filter = ("fabric",)
    search_fields = ("name",)
    list_select_related = ("fabric",)
    inlines = [GpuInline]


class NicInline(admin.TabularInline):
    model = Nic
    extra = 0
    raw_id_fields = ("port",)


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ("__str__", "host", "index", "rail", "fabric_name")
    list_filter = ("host__fabric", "rail")
    search_fields = ("host__name",)
    list_select_related = ("host", "host__fabric")
    inlines = [NicInline]

    @admin.display(description="fabric", ordering="host__fabric__name")
    def fabric_name(self, obj: Gpu) -> str:
        return obj.host.fabric.name


@admin.register(Nic)
class NicAdmin(admin.ModelAdmin):
    list_display = ("name", "host_name", "gpu", "rail", "port_label")
    list_filter = ("gpu__host__fabric", "rail")
    search_fields = ("name", "gpu__host__name", "port__switch__name")
    list_select_related = ("gpu", "gpu__host", "port", "port__switch")
    raw_id_fields = ("port",)

    @admin.display(description="host", ordering="gpu__host__name")
    def host_name(self, obj: Nic) -> str:
        return obj.gpu.host.name

    @admin.display(description="cabled to")
    def port_label(self, obj: Nic) -> str:
        return f"{obj.port.switch.name}:{obj.port.name}" if obj.port else "—"
