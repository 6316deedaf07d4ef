"""The twin's gNMI target through pygnmi (an independent client): Capabilities, Get, Subscribe
ONCE / POLL / STREAM (SAMPLE + ON_CHANGE), device timestamps on every notification."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import numpy as np
import pytest
from pygnmi.client import gNMIclient

from twin.gnmi_sources import QueueCounterSource
from twin.gnmi_target import GnmiFabric

pytestmark = pytest.mark.integration
PORTS = ("Ethernet0", "Ethernet1", "Ethernet2")


@pytest.fixture
def target():
    src = QueueCounterSource(PORTS, np.full(3, 400e9), lambda k: np.array([90e9, 10e9, 0.0]))
    fab = GnmiFabric({"leaf1": src}).start()
    yield fab, src
    fab.stop()


@contextmanager
def _pygnmi_subscriptions_cancelled_on_close() -> Iterator[list[BaseException]]:
    """pygnmi's subscription thread (``client.py``: ``enqueue_updates``) re-raises the CANCELLED its
    own channel close causes, which pytest reports as an unhandled thread exception. Exactly that
    exception is collected here (and counted by the test); any other thread error still fails."""
    cancelled: list[BaseException] = []
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        exc = args.exc_value
        if isinstance(exc, grpc.RpcError) and exc.code() == grpc.StatusCode.CANCELLED:  # type: ignore[attr-defined]
            cancelled.append(exc)
            return
        previous(args)

    threading.excepthook = hook
    try:
        yield cancelled
    finally:
        for t in threading.enumerate():  # the subscriptions end with the client's channel: wait for them
            if t.name.endswith("(enqueue_updates)"):
                t.join(5)
        threading.excepthook = previous


def test_capabilities_get_once_poll_stream(target) -> None:
    fab, src = target
    with _pygnmi_subscriptions_cancelled_on_close() as cancelled, \
            gNMIclient(target=("127.0.0.1", fab.ports["leaf1"]), insecure=True, gnmi_timeout=10) as gc:
        caps = gc.capabilities()
        assert caps["gnmi_version"] == "0.8.0"
        assert {m["name"] for m in caps["supported_models"]} >= {"openconfig-interfaces", "openconfig-qos"}
        got = gc.get(
            path=["/interfaces/interface[name=Ethernet1]/ethernet/state/port-speed"], encoding="proto"
        )
        n = got["notification"][0]
        assert n["timestamp"] > 0
        assert n["update"][0]["val"] == "SPEED_400GB"
        once = list(
            gc.subscribe2(
                subscribe={
                    "mode": "once",
                    "encoding": "proto",
                    "subscription": [
                        {
                            "path": "/qos/interfaces/interface[interface-id=*]/output/queues/queue[name=3]/state/ecn-marked-pkts"
                        }
                    ],
                }
            )
        )
        ups = once[0]["update"]["update"]
        assert len(ups) == 3 and once[0]["update"]["timestamp"] > 0 and once[-1] == {"sync_response": True}
        poll = gc.subscribe2(
            subscribe={
                "mode": "poll",
                "encoding": "proto",
                "subscription": [{"path": "/interfaces/interface[name=Ethernet0]/state/counters/out-octets"}],
            }
        )
        a = poll.get_update(timeout=10)["update"]["update"][0]["val"]
        b = poll.get_update(timeout=10)["update"]["update"][0]["val"]
        assert b > a  # 90 GB/s offered to a 50 GB/s port: the line is busy
        stream = gc.subscribe2(
            subscribe={
                "mode": "stream",
                "encoding": "proto",
                "subscription": [
                    {
                        "path": "/interfaces/interface[name=*]/state/counters/in-octets",
                        "mode": "sample",
                        "sample_interval": 100_000_000,
                    },
                    {"path": "/interfaces/interface[name=*]/state/oper-status", "mode": "on_change"},
                ],
            }
        )
        first = stream.get_update(timeout=10)
        assert len(first["update"]["update"]) == 6
        src.oper_up[1] = False
        seen_down = False
        for _ in range(20):
            msg = stream.get_update(timeout=10)
            assert msg["update"]["timestamp"] > 0
            for u in msg["update"]["update"]:
                if u["path"].endswith("oper-status"):
                    assert u["path"] == "interfaces/interface[name=Ethernet1]/state/oper-status"
                    seen_down = u["val"] == "DOWN"
            if seen_down:
                break
        assert seen_down
    assert len(cancelled) <= 2  # at most the two open subscriptions (poll, stream), nothing else
