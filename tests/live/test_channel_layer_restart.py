"""The channel layer outlives a Redis restart: the pool's connections die with the server, and
the first sockets to connect afterwards got a 500 ("Connection closed by server") in the
60-minute soak. With the layer's configured retry they reconnect. A real redis-server of its own,
restarted on its port (no other test's Redis is touched)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time

import pytest
import redis
from channels_redis.core import RedisChannelLayer
from django.conf import settings

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _redis_server(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind",
                             "127.0.0.1", "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    for _ in range(100):
        try:
            redis.Redis(port=port, socket_connect_timeout=0.2).ping()
            return proc
        except redis.RedisError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("redis-server did not start")


def test_sockets_join_their_groups_after_a_redis_restart() -> None:
    port = _free_port()
    host = dict(settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0], address=f"redis://127.0.0.1:{port}/0")
    server = _redis_server(port)

    async def scenario() -> None:
        nonlocal server
        layer = RedisChannelLayer(hosts=[host])
        await layer.group_add("run-1", await layer.new_channel())  # the pool holds a connection now
        server.terminate()
        server.wait(10)
        server = _redis_server(port)
        for _ in range(3):  # what the next sockets do on connect: each a new channel in the group
            await layer.group_add("run-1", await layer.new_channel())
        await layer.group_send("run-1", {"type": "run.changed"})
        await layer.close_pools()

    try:
        asyncio.run(scenario())
    finally:
        server.terminate()
        server.wait(10)
