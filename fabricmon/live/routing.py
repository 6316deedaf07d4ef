"""WebSocket routes (consumers arrive with the live dashboard)."""

websocket_urlpatterns: list = []
