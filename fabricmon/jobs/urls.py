"""Jobs URLs: the token-authenticated ingest API under ``api/`` and the job owners' pages."""

from django.urls import path

from fabricmon.jobs import api

app_name = "jobs"
urlpatterns = [
    path("api/openapi.json", api.openapi, name="openapi"),
    path("api/clock", api.clock, name="clock"),
    path("api/runs", api.runs, name="api-runs"),
    path("api/runs/<int:run_id>", api.run_detail, name="api-run"),
    path("api/runs/<int:run_id>/tags", api.run_tags, name="api-run-tags"),
    path("api/runs/<int:run_id>/end", api.run_end, name="api-run-end"),
    path("api/runs/<int:run_id>/ranks", api.rank_map, name="api-run-ranks"),
    path("api/runs/<int:run_id>/events", api.events, name="api-run-events"),
    path("api/runs/<int:run_id>/uploads", api.uploads, name="api-run-uploads"),
    path("api/runs/<int:run_id>/matrix", api.matrix, name="api-run-matrix"),
]
