"""The twin's gNMI targets: one grpc.aio server per switch on 127.0.0.1 (insecure on loopback).

Serves Capabilities, Get and Subscribe (STREAM with SAMPLE / ON_CHANGE / TARGET_DEFINED, ONCE,
POLL) over the leaves in :mod:`collectors.gnmi.paths`, with pygnmi's bundled stubs. Every
notification carries the device timestamp of the counter read it came from.

A switch is backed by a :class:`CounterSource` — anything with ``port_names`` and ``read()``
returning ``(ts_ns, {leaf key: array per port})`` — so the target runs standalone (tests, bench)
or on the twin's traffic (twin/gnmi_sources.py). Faults for tests: :meth:`GnmiFabric.stop_switch` /
:meth:`start_switch` (same port), and ``mangle`` hooks that rewrite outgoing responses.

    GnmiFabric (one thread, one asyncio loop)
      ├── leaf-r0  grpc.aio server 127.0.0.1:41231  ── SwitchServicer(source_r0)
      ├── leaf-r1  grpc.aio server 127.0.0.1:41233  ── SwitchServicer(source_r1)
      └── …
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
import numpy as np
import numpy.typing as npt
from pygnmi.spec.v080 import gnmi_pb2 as pb
from pygnmi.spec.v080 import gnmi_pb2_grpc as pbg

from collectors.gnmi.lldp import is_lldp_request, neighbour_notification
from collectors.gnmi.paths import LEAVES, PORT, Leaf, leaf_path
from fabricmon.core.topology.cabling import LldpNeighbour

Snapshot = tuple[int, Mapping[str, npt.NDArray[Any]]]
Mangle = Callable[[pb.SubscribeResponse], Sequence[pb.SubscribeResponse]]
ON_CHANGE_CHECK_S = 0.1


class CounterSource(Protocol):
    """One switch's counters. ``read()`` clears read-and-clear leaves (the queue watermark) unless
    ``clear=False`` (used for ON_CHANGE diffing, which must not eat a sample's peak)."""

    port_names: tuple[str, ...]

    def read(self, *, clear: bool = True) -> Snapshot: ...


# ---- path matching ------------------------------------------------------------------------
def _match(req: Sequence[pb.PathElem], leaf: Leaf, port_names: Sequence[str]) -> npt.NDArray[np.intp]:
    """Port indices whose instance of ``leaf`` lies under the request path (``*`` wildcards)."""
    if len(req) > len(leaf.elems):
        return np.zeros(0, dtype=np.intp)
    port_want: str | None = None
    for r, (name, keys) in zip(req, leaf.elems, strict=False):
        if r.name not in ("*", name):
            return np.zeros(0, dtype=np.intp)
        kd = dict(keys)
        for k, v in r.key.items():
            if v == "*":
                continue
            if k not in kd:
                return np.zeros(0, dtype=np.intp)
            if kd[k] is PORT:
                if port_want not in (None, v):
                    return np.zeros(0, dtype=np.intp)
                port_want = v
            elif str(kd[k]) != v:
                return np.zeros(0, dtype=np.intp)
    if port_want is None:
        return np.arange(len(port_names), dtype=np.intp)
    return np.asarray([i for i, p in enumerate(port_names) if p == port_want], dtype=np.intp)


@dataclass
class _Selection:
    """The (leaf, ports) a set of request paths covers, with a reusable response template."""

    parts: list[tuple[int, npt.NDArray[np.intp]]]
    template: pb.SubscribeResponse
    port_names: tuple[str, ...]

    @classmethod
    def build(cls, paths: Sequence[pb.Path], prefix: pb.Path, port_names: Sequence[str]) -> _Selection:
        chosen: dict[int, set[int]] = {}
        for p in paths:
            req = [*prefix.elem, *p.elem]
            for li, leaf in enumerate(LEAVES):
                idx = _match(req, leaf, port_names)
                if len(idx):
                    chosen.setdefault(li, set()).update(idx.tolist())
        parts = [(li, np.asarray(sorted(s), dtype=np.intp)) for li, s in sorted(chosen.items())]
        tmpl = pb.SubscribeResponse()
        for li, idx in parts:
            for i in idx:
                u = tmpl.update.update.add()
                u.path.CopyFrom(leaf_path(LEAVES[li], port_names[i]))
        return cls(parts, tmpl, tuple(port_names))

    def render(
        self, snap: Snapshot, only_changed: Mapping[int, npt.NDArray[np.bool_]] | None = None
    ) -> pb.SubscribeResponse:
        """Fill the template with one snapshot (a fresh copy; the template stays clean)."""
        ts, values = snap
        if only_changed is not None:
            out = pb.SubscribeResponse()
            for li, idx in self.parts:
                mask = only_changed.get(li)
                arr = values.get(LEAVES[li].key)
                if mask is None or arr is None:
                    continue
                for i in idx[mask[idx]]:
                    u = out.update.update.add()
                    u.path.CopyFrom(leaf_path(LEAVES[li], self.port_names[i]))
                    _set(u.val, arr[i])
            out.update.timestamp = ts
            return out
        out = pb.SubscribeResponse()
        out.CopyFrom(self.template)
        ups = out.update.update
        k = 0
        missing: list[int] = []
        for li, idx in self.parts:
            arr = values.get(LEAVES[li].key)
            if arr is None:
                missing.extend(range(k, k + len(idx)))
                k += len(idx)
                continue
            sel = arr[idx]
            if sel.dtype.kind in "ui":
                for j, v in enumerate(sel.tolist()):
                    ups[k + j].val.uint_val = v
            else:
                for j, v in enumerate(sel.tolist()):
                    ups[k + j].val.string_val = str(v)
            k += len(idx)
        for j in reversed(missing):  # a source without that leaf: do not serve empty values
            del ups[j]
        out.update.timestamp = ts
        return out


def _set(val: pb.TypedValue, v: Any) -> None:
    if isinstance(v, np.integer | int):
        val.uint_val = int(v)
    else:
        val.string_val = str(v)


# ---- the servicer -------------------------------------------------------------------------
class SwitchServicer(pbg.gNMIServicer):
    """gNMI for one switch. ``active_streams`` counts open Subscribe RPCs (tests assert ≤ 1)."""

    def __init__(self, name: str, source: CounterSource) -> None:
        self.name = name
        self.source = source
        self.mangle: Mangle | None = None
        self.lldp: Callable[[], Sequence[LldpNeighbour]] | None = None  # OpenConfig LLDP (Get)
        self.active_streams = 0
        self.max_active_streams = 0
        self.subscribes = 0
        self._selections: dict[bytes, _Selection] = {}  # by request paths: a re-subscribe reuses it

    def _selection(self, paths: Sequence[pb.Path], prefix: pb.Path) -> _Selection:
        # built once per distinct request: a selection of every leaf of 64 ports is ~1,000 path
        # messages, and 184 collectors re-subscribing after a stall built them over and over (48 %
        # of the 16,896-port twin's time, the streams went stale, the collectors re-subscribed …)
        key = b"|".join([prefix.SerializeToString(), *(p.SerializeToString() for p in paths)])
        hit = self._selections.get(key)
        if hit is None:
            hit = _Selection.build(paths, prefix, self.source.port_names)
            if len(self._selections) >= 8:
                self._selections.pop(next(iter(self._selections)))
            self._selections[key] = hit
        return hit

    def _out(self, resp: pb.SubscribeResponse) -> Sequence[pb.SubscribeResponse]:
        return self.mangle(resp) if self.mangle is not None else (resp,)

    async def Capabilities(  # noqa: N802 - gRPC method names are fixed by gnmi.proto
        self, request: pb.CapabilityRequest, context: Any
    ) -> pb.CapabilityResponse:
        models = [
            pb.ModelData(
                name="openconfig-interfaces", organization="OpenConfig working group", version="3.8.1"
            ),
            pb.ModelData(
                name="openconfig-if-ethernet", organization="OpenConfig working group", version="2.18.0"
            ),
            pb.ModelData(name="openconfig-qos", organization="OpenConfig working group", version="2.2.0"),
            pb.ModelData(name="openconfig-qos-ext", organization="SONiC", version="0.1.0"),
            *([pb.ModelData(name="openconfig-lldp", organization="OpenConfig working group", version="0.2.1")]
              if self.lldp is not None else []),
        ]
        return pb.CapabilityResponse(
            supported_models=models, supported_encodings=[pb.JSON, pb.PROTO], gNMI_version="0.8.0"
        )

    async def Get(self, request: pb.GetRequest, context: Any) -> pb.GetResponse:  # noqa: N802
        if self.lldp is not None and any(is_lldp_request(p, request.prefix) for p in request.path):
            return pb.GetResponse(notification=[neighbour_notification(self.lldp(), time.time_ns())])
        sel = self._selection(request.path, request.prefix)
        if not sel.parts:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no leaf under the requested paths")
        resp = sel.render(self.source.read())
        return pb.GetResponse(notification=[resp.update])

    async def Set(self, request: pb.SetRequest, context: Any) -> pb.SetResponse:  # noqa: N802
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "read-only target")
        raise AssertionError  # unreachable: abort raises

    async def Subscribe(  # noqa: N802
        self, request_iterator: AsyncIterator[pb.SubscribeRequest], context: Any
    ) -> AsyncIterator[pb.SubscribeResponse]:
        self.active_streams += 1
        self.subscribes += 1
        self.max_active_streams = max(self.max_active_streams, self.active_streams)
        try:
            first = await request_iterator.__anext__()
            if not first.HasField("subscribe"):
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, "first SubscribeRequest must carry a SubscriptionList"
                )
            async for resp in self._serve(first.subscribe, request_iterator, context):
                for out in self._out(resp):
                    yield out
        finally:
            self.active_streams -= 1

    async def _serve(
        self, sl: pb.SubscriptionList, requests: AsyncIterator[pb.SubscribeRequest], context: Any
    ) -> AsyncIterator[pb.SubscribeResponse]:
        sync = pb.SubscribeResponse(sync_response=True)
        every = self._selection([s.path for s in sl.subscription], sl.prefix)
        if not every.parts:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no leaf under the subscribed paths")
        if sl.mode == pb.SubscriptionList.ONCE:
            yield every.render(self.source.read())
            yield sync
            return
        if sl.mode == pb.SubscriptionList.POLL:
            yield every.render(self.source.read())
            yield sync
            async for req in requests:
                if req.HasField("poll"):
                    yield every.render(self.source.read())
                    yield sync
            return
        async for resp in self._stream(sl, every, context):
            yield resp

    async def _stream(
        self, sl: pb.SubscriptionList, every: _Selection, context: Any
    ) -> AsyncIterator[pb.SubscribeResponse]:
        # SAMPLE groups by interval; ON_CHANGE (and TARGET_DEFINED state leaves) are diffed.
        sampled: dict[int, list[pb.Path]] = {}
        on_change: list[pb.Path] = []
        for s in sl.subscription:
            state_leaf = any(
                len(_match([*sl.prefix.elem, *s.path.elem], lf, self.source.port_names))
                for lf in LEAVES
                if lf.kind == "state"
            )
            if s.mode == pb.ON_CHANGE or (s.mode == pb.TARGET_DEFINED and state_leaf):
                on_change.append(s.path)
            else:
                sampled.setdefault(s.sample_interval or 1_000_000_000, []).append(s.path)
        groups = [(ns / 1e9, self._selection(paths, sl.prefix)) for ns, paths in sorted(sampled.items())]
        watch = self._selection(on_change, sl.prefix) if on_change else None
        snap = self.source.read(clear=False)
        last_state = {
            li: np.asarray(snap[1][LEAVES[li].key]).copy()
            for li, _ in (watch.parts if watch else [])
            if LEAVES[li].key in snap[1]
        }
        if not sl.updates_only:
            yield every.render(self.source.read())
        yield pb.SubscribeResponse(sync_response=True)
        now = time.monotonic()
        due = [now + iv for iv, _ in groups]
        next_check = now + ON_CHANGE_CHECK_S
        while not context.done():
            wake = min([*due, next_check]) if watch else min(due, default=now + 3600)
            await asyncio.sleep(max(0.0, wake - time.monotonic()))
            now = time.monotonic()
            for k, (iv, sel) in enumerate(groups):
                if now >= due[k]:
                    due[k] += iv
                    if due[k] < now:  # fell behind (slow consumer): skip, never burst
                        due[k] = now + iv
                    yield sel.render(self.source.read())
            if watch and now >= next_check:
                next_check = now + ON_CHANGE_CHECK_S
                snap = self.source.read(clear=False)
                changed = {}
                for li, prev in last_state.items():
                    cur = np.asarray(snap[1][LEAVES[li].key])
                    changed[li] = cur != prev
                    last_state[li] = cur.copy()
                if any(m.any() for m in changed.values()):
                    yield watch.render(snap, only_changed=changed)


def malformed_after(resp: pb.SubscribeResponse) -> list[pb.SubscribeResponse]:
    """A ``mangle`` fault: the real response, then one of every kind of bad input a collector
    must count and skip (wrong type, unknown path, huge value, no timestamp, error, empty)."""
    if not resp.HasField("update") or not len(resp.update.update):
        return [resp]
    real = resp.update
    first = real.update[0]
    bad = pb.SubscribeResponse()
    bad.update.timestamp = real.timestamp + 1
    u = bad.update.update.add()
    u.path.CopyFrom(first.path)
    u.val.string_val = "lots"
    u = bad.update.update.add()
    u.path.elem.add(name="no-such-leaf")
    u.val.uint_val = 1
    u = bad.update.update.add()
    u.path.CopyFrom(first.path)
    u.val.uint_val = (1 << 64) - 1
    no_ts = pb.SubscribeResponse()
    no_ts.update.update.add().CopyFrom(first)
    err = pb.SubscribeResponse()
    err.error.code = 13
    err.error.message = "garbage"
    return [resp, bad, no_ts, err, pb.SubscribeResponse()]


# ---- the fabric of servers ----------------------------------------------------------------
class GnmiFabric:
    """All switches' targets on one background thread; ports stay fixed across stop/start."""

    def __init__(
        self, sources: Mapping[str, CounterSource], *, ports: Mapping[str, int] | None = None
    ) -> None:
        self.servicers = {name: SwitchServicer(name, src) for name, src in sources.items()}
        self.ports: dict[str, int] = dict(ports or {})
        self._servers: dict[str, grpc.aio.Server] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gnmi-targets", daemon=True)

    def start(self) -> GnmiFabric:
        self._thread.start()
        for name in self.servicers:
            self.start_switch(name)
        return self

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    def start_switch(self, name: str) -> int:
        """(Re)start one switch's server, on its previous port if it had one; returns the port."""
        return int(self._call(self._start(name)))

    async def _start(self, name: str) -> int:
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        pbg.add_gNMIServicer_to_server(self.servicers[name], server)
        port = server.add_insecure_port(f"127.0.0.1:{self.ports.get(name, 0)}")
        if port == 0:
            raise OSError(f"gNMI target {name}: cannot bind 127.0.0.1:{self.ports.get(name, 0)}")
        await server.start()
        self.ports[name] = port
        self._servers[name] = server
        return port

    def stop_switch(self, name: str) -> None:
        """Kill one switch's server (open streams are cancelled: the collector sees stream loss)."""
        server = self._servers.pop(name, None)
        if server is not None:
            self._call(server.stop(grace=None))

    def stop(self) -> None:
        for name in list(self._servers):
            self.stop_switch(name)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def __enter__(self) -> GnmiFabric:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
