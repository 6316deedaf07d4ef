"""WebSocket routes: one consumer per fabric view."""

from django.urls import path

from fabricmon.live.consumers import FabricConsumer

websocket_urlpatterns = [
    path("ws/fabric/<str:fabric>/", FabricConsumer.as_asgi()),
]
