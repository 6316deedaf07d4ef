from django.urls import path, re_path

from fabricmon.live import views

app_name = "live"

urlpatterns = [
    path("", views.index, name="index"),
    path("fabric/<str:fabric>/", views.fabric, name="fabric"),
    path("fabric/<str:fabric>/layout.json", views.layout_json, name="layout"),
    path("fabric/<str:fabric>/port/<int:position>/", views.port, name="port"),
    path("fabric/<str:fabric>/port/<int:position>.json", views.port_json, name="port_json"),
    path("fabric/<str:fabric>/switches/", views.switches, name="switches"),
    path("fabric/<str:fabric>/health.json", views.health_json, name="health"),
    path("fabric/<str:fabric>/runs.json", views.runs_json, name="runs"),
    path("fabric/<str:fabric>/runs/<int:run_id>/markers.json", views.markers_json, name="markers"),
    re_path(r"^static/(?P<path>.+)$", views.static, name="static"),
]
