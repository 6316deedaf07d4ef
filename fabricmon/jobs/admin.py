"""Admin for runs, their rank maps and uploads, and API tokens.

A run's name, tags, state, fabric and world size are editable (an admin fixing a run a job got
wrong); what the server measured (storage, probe drops, pruning) is read-only, and runs are made
by their owners, not here. Events, blocks, matrices and rank maps are not listed: up to millions
of rows, read through the run's pages instead.

An API token is a credential: only its public prefix is shown (``fmj_<prefix>_…``), never its
digest. Tokens are made by ``create_api_token`` or the runs page (the clear token is shown once,
there); here they can only be renamed and revoked.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from fabricmon.jobs.models import ApiToken, Run, TraceUpload
from fabricmon.jobs.tokens import revoke_token


class UploadInline(admin.TabularInline):
    model = TraceUpload
    extra = 0
    fields = ("kind", "filename", "state", "size_bytes", "events_stored", "events_rejected", "created_at")
    readonly_fields = fields
    can_delete = False
    max_num = 0
    ordering = ("-created_at",)


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "fabric", "state", "world_size", "started_at", "ended_at")
    list_filter = ("state", "fabric")
    search_fields = ("name", "owner__username", "fabric")
    list_select_related = ("owner",)
    date_hierarchy = "started_at"
    fields = ("name", "owner", "tags", "state", "fabric", "world_size", "started_at", "ended_at", "pages",
              "rank_map", "stored_bytes", "stored_at", "pruned_below_step", "pruned_note", "probe_dropped")
    readonly_fields = ("owner", "started_at", "pages", "rank_map", "stored_bytes", "stored_at",
                       "pruned_below_step", "pruned_note", "probe_dropped")
    inlines = (UploadInline,)

    @admin.display(description="pages")
    def pages(self, obj: Run) -> str:
        return format_html('<a href="{}">run page</a> · <a href="{}">phase view</a>',
                           reverse("jobs:run", args=[obj.pk]), reverse("phases:run", args=[obj.pk]))

    @admin.display(description="rank map")
    def rank_map(self, obj: Run) -> str:
        # a count, not an inline: a 16k-rank job's map is read on the run page, not in one form
        n = obj.ranks.count()
        return f"{n} rank{'s' if n != 1 else ''} mapped" if n else "none"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs are made by their owners: the runs page, the API, the probe


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("shown_token", "name", "user", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("name", "user__username", "prefix")
    list_select_related = ("user",)
    fields = ("shown_token", "name", "user", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("shown_token", "user", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)

    @admin.display(description="token")
    def shown_token(self, obj: ApiToken) -> str:
        return f"fmj_{obj.prefix}_…"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a new token's secret must be shown once to its user: create_api_token / runs page

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        live = list(queryset.filter(revoked_at__isnull=True))
        for row in live:
            revoke_token(row)
        n = len(live)
        self.message_user(request, f"{n} token{'s' if n != 1 else ''} revoked")

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # revoke, keeping the audit of who had a token
        return actions


@admin.register(TraceUpload)
class TraceUploadAdmin(admin.ModelAdmin):
    list_display = ("filename", "kind", "run", "state", "size_bytes", "events_stored", "events_rejected",
                    "created_at")
    list_filter = ("state", "kind")
    search_fields = ("filename", "run__name")
    list_select_related = ("run", "run__owner")
    exclude = ("path",)  # a server-side file path

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in TraceUpload._meta.fields if f.name != "path"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # uploads come through the run page, the API or import_trace
