"""Admin for alerts. A receiver's URL (a chat hook URL is the credential) and webhook secret are
write-only, as the switches' SNMP secrets are (topology/admin.py): shown masked (``••••`` + the
last 4), never rendered into the form; an empty field on save keeps the stored value."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from fabricmon.alerts.forms import ROUTE_FIELDS, route_fields
from fabricmon.alerts.models import (
    Alert,
    AlertTransition,
    AllowedHost,
    Episode,
    GroupMember,
    NotificationGroup,
    Outbox,
    Receiver,
    Rule,
    Silence,
)
from fabricmon.alerts.timing import group_key
from fabricmon.base.sealed import shown


class ReceiverAdminForm(forms.ModelForm):
    url = forms.URLField(max_length=500, assume_scheme="https", required=False,
                         widget=forms.TextInput(attrs={"size": 80, "autocomplete": "off"}))
    secret = forms.CharField(max_length=200, required=False, widget=forms.PasswordInput(render_value=False))
    clear_secret = forms.BooleanField(required=False, label="clear secret")
    group_by, group_wait_s, group_interval_s, repeat_interval_s = route_fields()

    class Meta:
        model = Receiver
        fields = ("name", "kind", "url", "secret", "fabric", "kinds", "owner", "send_resolved", *ROUTE_FIELDS,
                  "disabled", "last_error")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initial["url"] = self.initial["secret"] = ""  # never echo a stored secret into the page
        if self.instance.pk:
            self.fields["url"].help_text = f"stored: {shown(self.instance.url)}; leave empty to keep it"
            self.fields["secret"].help_text = (
                f"stored: {shown(self.instance.secret)}; leave empty to keep it" if self.instance.secret
                else "not set (whsec_… for signed webhooks)")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not data.get("url"):
            if not self.instance.pk:
                self.add_error("url", "a receiver needs a URL")
            else:
                data["url"] = self.instance.url
        if data.get("clear_secret"):
            data["secret"] = ""
        elif not data.get("secret") and self.instance.pk:
            data["secret"] = self.instance.secret
        return data


@admin.register(Receiver)
class ReceiverAdmin(admin.ModelAdmin):
    form = ReceiverAdminForm
    list_display = ("name", "kind", "masked_url", "fabric", "owner", "disabled")
    list_filter = ("kind", "disabled")
    search_fields = ("name", "fabric")
    fields = ("name", "kind", "url", "secret", "clear_secret", "fabric", "kinds", "owner", "send_resolved",
              *ROUTE_FIELDS, "disabled", "last_error")

    @admin.display(description="URL")
    def masked_url(self, obj: Receiver) -> str:
        return shown(obj.url)


class GroupMemberInline(admin.TabularInline):
    model = GroupMember
    extra = 0


@admin.register(NotificationGroup)
class NotificationGroupAdmin(admin.ModelAdmin):
    """A receiver's notification groups: their timers, what they last said, their alerts."""

    list_display = ("receiver", "shown_key", "next_flush_at", "notified_at", "flushes", "emptied_at")
    list_filter = ("receiver",)
    inlines = (GroupMemberInline,)

    @admin.display(description="group key")
    def shown_key(self, obj: NotificationGroup) -> str:
        return group_key(obj.labels)


admin.site.register(Rule)
admin.site.register(Silence)
admin.site.register(AllowedHost)
admin.site.register(Episode)
admin.site.register(Alert)
admin.site.register(AlertTransition)
admin.site.register(Outbox)
