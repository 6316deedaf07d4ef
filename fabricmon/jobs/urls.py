"""Jobs URLs: the token-authenticated ingest API under ``api/`` and the job owners' pages."""

from django.urls import path

from fabricmon.jobs import api, views

app_name = "jobs"
urlpatterns = [
    path("", views.run_list, name="runs"),
    path("tokens/new", views.token_create, name="token-create"),
    path("tokens/<int:token_id>/revoke", views.token_revoke, name="token-revoke"),
    path("runs/<int:run_id>/", views.run_detail, name="run"),
    path("runs/<int:run_id>/upload", views.run_upload, name="run-upload"),
    path("runs/<int:run_id>/fabric", views.run_fabric, name="run-fabric"),
    path("runs/<int:run_id>/ranks/build", views.run_rank_map_build, name="run-ranks-build"),
    path("runs/<int:run_id>/uploads/<int:upload_id>.json", views.run_upload_status, name="run-upload-status"),
    path("runs/<int:run_id>/timeline.json", views.run_timeline, name="run-timeline"),
    path("runs/<int:run_id>/matrix.json", views.run_matrix, name="run-matrix"),
    path("api/openapi.json", api.openapi, name="openapi"),
    path("api/clock", api.clock, name="clock"),
    path("api/runs", api.runs, name="api-runs"),
    path("api/runs/<int:run_id>", api.run_detail, name="api-run"),
    path("api/runs/<int:run_id>/tags", api.run_tags, name="api-run-tags"),
    path("api/runs/<int:run_id>/end", api.run_end, name="api-run-end"),
    path("api/runs/<int:run_id>/fabric", api.run_fabric, name="api-run-fabric"),
    path("api/runs/<int:run_id>/ranks", api.rank_map, name="api-run-ranks"),
    path("api/runs/<int:run_id>/ranks/build", api.rank_map_build, name="api-run-ranks-build"),
    path("api/runs/<int:run_id>/events", api.events, name="api-run-events"),
    path("api/runs/<int:run_id>/uploads", api.uploads, name="api-run-uploads"),
    path("api/runs/<int:run_id>/uploads/<int:upload_id>", api.upload_detail, name="api-run-upload"),
    path("api/runs/<int:run_id>/matrix", api.matrix, name="api-run-matrix"),
]
