"""Reports URLs, mounted under ``jobs/`` beside the run pages they belong to."""

from django.urls import path

from fabricmon.reports import views

app_name = "reports"
urlpatterns = [
    path("runs/<int:run_id>/report.html", views.run_report, name="run-report"),
    path("runs/<int:run_id>/ports.csv", views.run_ports_csv, name="run-ports-csv"),
    path("runs/<int:run_id>/ports.parquet", views.run_ports_parquet, name="run-ports-parquet"),
    path("compare/", views.compare, name="compare"),
]
