from django.urls import path

from fabricmon.metrics import views

urlpatterns = [path("metrics", views.metrics, name="metrics")]
