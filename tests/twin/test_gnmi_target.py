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


def test_a_sample_written_as_wire_bytes_is_the_message_the_template_fills() -> None:
    """The streams' vectorized render (twin.gnmi_target._Wire) against the message filled value by
    value: the same bytes, for values of every varint length (0, 127, 128 … 2**64 − 1) and updates
    whose length takes one byte and two. A wrong offset or length byte fails the parse or the
    equality."""
    from pygnmi.spec.v080 import gnmi_pb2 as pb

    from collectors.gnmi.paths import LEAVES, subscription_paths
    from twin.gnmi_target import _Selection

    ports = tuple(f"Ethernet{i}" for i in range(48))
    numeric = [lf.key for lf in LEAVES if lf.kind != "state"]
    sel = _Selection.build(subscription_paths(numeric), pb.Path(), ports)
    body = sel.wire.path_len + 3
    assert (body + 1 < 128).any() and (body + 1 >= 128).any()  # both length forms are exercised
    rng = np.random.default_rng(7)
    edges = np.array([0, 1, 127, 128, 16383, 16384, (1 << 63) - 1, 1 << 63, (1 << 64) - 1], dtype=np.uint64)
    for trial in range(4):
        values = {}
        for k in numeric:
            bits = rng.integers(0, 65, size=len(ports)).astype(np.uint64)
            v = rng.integers(0, 1 << 63, size=len(ports), dtype=np.uint64) >> (np.uint64(64) - np.maximum(bits, 1))
            v[: len(edges)] = np.roll(edges, trial)
            values[k] = v
        ts = 1_795_000_000_123_456_789 + trial
        wire = sel.render_wire((ts, values))
        filled = pb.SubscribeResponse()
        filled.CopyFrom(sel.template)
        k = 0
        for li, idx in sel.parts:
            for v in values[LEAVES[li].key][idx].tolist():
                filled.update.update[k].val.uint_val = v
                k += 1
        filled.update.timestamp = ts
        assert wire == filled.SerializeToString()
        assert pb.SubscribeResponse.FromString(wire) == filled
    # a leaf the source does not serve as counters: the value-by-value render, still bytes
    values = {k: np.arange(len(ports), dtype=np.int64) for k in numeric}
    assert pb.SubscribeResponse.FromString(sel.render_wire((5, values))) == sel.render((5, values))
