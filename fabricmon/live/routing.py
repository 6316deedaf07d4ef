"""WebSocket routes: one consumer per fabric view, one per run's phase view."""

from django.urls import path

from fabricmon.live.consumers import FabricConsumer
from fabricmon.phases.consumers import PhaseConsumer

websocket_urlpatterns = [
    path("ws/fabric/<str:fabric>/", FabricConsumer.as_asgi()),
    path("ws/phases/runs/<int:run_id>/", PhaseConsumer.as_asgi()),
]
