"""What every WebSocket of fabricmon shares: close codes, group names, and the broadcaster.

Sync code (ingest, imports) wakes the sockets above it through :func:`run_changed` instead of
importing the app that owns them, as paperless-ngx does: one ``group_send`` on the channel layer,
after the caller's transaction commits. Best effort — every socket also has its own tick, so a
lost message costs at most one tick and a channel-layer failure never fails an ingest.
"""

from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

# Close codes the browser acts on (4000-4999 are the application's range).
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_TOO_SLOW = 4408  # the client stopped acknowledging; it reconnects and resynchronises
CLOSE_NO_SUCH_RUN = 4404  # the phase socket's run does not exist
# The server's side failed (Redis or the database gone): reconnect with backoff. Not 1011:
# Daphne's WebSocket layer (autobahn) lets a server close only with 1000 or 3000-4999.
CLOSE_SERVER_ERROR = 4500

RUN_CHANGED = "run.changed"  # the message type; consumers handle it as ``run_changed``


def run_group(run_id: int) -> str:
    """The channel-layer group of a run's open phase sockets."""
    return f"phases.run.{int(run_id)}"


def run_changed(run_id: int) -> None:
    """Tell the run's open sockets to look now (after the caller's transaction commits)."""

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(run_group(run_id), {"type": RUN_CHANGED, "run": int(run_id)})
        except Exception:  # best effort: the sockets' tick covers a lost nudge
            return

    transaction.on_commit(send)
