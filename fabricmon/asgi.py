"""ASGI entry point: Django over HTTP, Channels consumers over WebSocket (served by Daphne)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fabricmon.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from fabricmon.jobs.body_guard import BodyGuard  # noqa: E402
from fabricmon.live import routing as live_routing  # noqa: E402
from fabricmon.phases import routing as phases_routing  # noqa: E402

# Each app owns its socket routes; only this file knows them all (no app imports another's consumers).
websocket_urlpatterns = [*live_routing.websocket_urlpatterns, *phases_routing.websocket_urlpatterns]

application = ProtocolTypeRouter(
    {
        # body limits and the ingest token before Django reads a byte (inside Daphne, the same
        # limits apply even earlier: fabricmon/serve.py)
        "http": BodyGuard(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
