"""WebSocket routes of the live app (``fabricmon/asgi.py`` composes every app's routes)."""

from django.urls import path

from fabricmon.live.consumers import FabricConsumer

websocket_urlpatterns = [
    path("ws/fabric/<str:fabric>/", FabricConsumer.as_asgi()),
]
