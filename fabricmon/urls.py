"""URL map. Each app owns its own ``urls.py``; this file only mounts them."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("topology/", include("fabricmon.topology.urls")),
    path("jobs/", include("fabricmon.jobs.urls")),
    path("alerts/", include("fabricmon.alerts.urls")),
    path("phases/", include("fabricmon.phases.urls")),
    path("whatif/", include("fabricmon.whatif.urls")),
    path("", include("fabricmon.metrics.urls")),
    path("", include("fabricmon.live.urls")),
]
