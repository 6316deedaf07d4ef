from django.urls import path

from fabricmon.live import views

app_name = "live"

urlpatterns = [
    path("", views.index, name="index"),
]
