"""The worker's long-lived event loop (one per process under Celery; one per thread elsewhere).

pysnmp 7 binds its ``SnmpEngine`` to the loop that created it, an engine cannot be reused across
``asyncio.run()`` calls (it hangs), and each new engine costs ~0.45 s of warm-up
(reference/telemetry.md §1.5). So a collector process keeps *one* loop for its whole life and runs
every shard lease on it; ``collectors.snmp.engine.loop_context`` then hands out the one engine
of that loop. The loop is created lazily on first use; Celery's ``worker_process_init`` calls
:func:`reset_after_fork` so a forked child never inherits its parent's loop.

Thread-local rather than process-global so that tests (and a threaded pool) can run two shard
loops in one process without sharing a loop across threads.
"""

from __future__ import annotations

import asyncio
import threading

from collectors.snmp.engine import close_loop_context

_local = threading.local()


def event_loop() -> asyncio.AbstractEventLoop:
    """This thread's long-lived loop (created on first use, never closed while the worker lives)."""
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        _local.loop = loop
    return loop


def reset_after_fork() -> None:
    """Forget any loop inherited through fork (its selector and sockets belong to the parent)."""
    _local.__dict__.clear()


def close_event_loop() -> None:
    """Close this thread's loop and its SNMP engine (tests; worker shutdown)."""
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        return
    async def _close() -> None:
        close_loop_context()

    loop.run_until_complete(_close())
    loop.close()
    _local.loop = None
