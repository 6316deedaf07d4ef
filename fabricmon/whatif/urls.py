"""What-if URLs: the page, its JSON, and the fabric's scheduler exports."""

from django.urls import path

from fabricmon.whatif import views

app_name = "whatif"
urlpatterns = [
    path("runs/<int:run_id>/", views.run_page, name="run"),
    path("runs/<int:run_id>/whatif.json", views.run_api, name="run-api"),
    path("runs/<int:run_id>/export/<str:kind>", views.export, name="export"),
]
