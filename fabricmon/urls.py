"""URL map. Each app owns its own ``urls.py``; this file only mounts them."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from fabricmon.base import access

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("topology/", include("fabricmon.topology.urls")),
    path("jobs/", include("fabricmon.jobs.urls")),
    path("jobs/", include("fabricmon.reports.urls")),  # a run's report, exports and the comparison
    path("alerts/", include("fabricmon.alerts.urls")),
    # /phases/ (the README's name for the phase views): the runs list, which links each run's view
    path("phases/", access.logged_in(RedirectView.as_view(pattern_name="jobs:runs")), name="phases-index"),
    path("phases/", include("fabricmon.phases.urls")),
    path("whatif/", include("fabricmon.whatif.urls")),
    path("", include("fabricmon.metrics.urls")),
    path("", include("fabricmon.live.urls")),
]
