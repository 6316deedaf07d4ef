"""WebSocket routes of the phases app (``fabricmon/asgi.py`` composes every app's routes)."""

from django.urls import path

from fabricmon.phases.consumers import PhaseConsumer

websocket_urlpatterns = [
    path("ws/phases/runs/<int:run_id>/", PhaseConsumer.as_asgi()),
]
