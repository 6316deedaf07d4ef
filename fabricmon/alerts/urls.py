from django.urls import path

from fabricmon.alerts import views

app_name = "alerts"

urlpatterns = [
    path("", views.alert_list, name="list"),
    path("<int:pk>/ack/", views.acknowledge, name="ack"),
    path("silences/", views.create_silence, name="silence"),
    path("episodes/<int:pk>/", views.episode_detail, name="episode"),
    path("receivers/", views.receivers, name="receivers"),
    path("receivers/<int:pk>/test/", views.send_test, name="send_test"),
    path("rules/", views.rules, name="rules"),
]
