"""Phase view URLs: the page and its JSON."""

from django.urls import path

from fabricmon.phases import views

app_name = "phases"
urlpatterns = [
    path("runs/<int:run_id>/", views.run_page, name="run"),
    path("runs/<int:run_id>/views.json", views.run_api, name="run-api"),
]
