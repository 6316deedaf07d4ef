"""One long-lived gNMI subscription per target, reconnecting on loss (grpc.aio, no Django).

    GnmiSession.run() ── connect ─▶ Subscribe(STREAM: SAMPLE counters, ON_CHANGE oper-status)
          ▲                            │  updates → TargetArrays (decode.py)
          │                            │  sync_response → backoff reset, health up
          └── sleep backoff ◀── stream lost / stale / RPC error (health down, error counted)

* Exactly one Subscribe RPC per session at any time: the loop is sequential, the channel of the
  previous attempt is closed before the next is opened, and a :class:`GnmiCollector` keeps one
  session per target name.
* Backoff: capped exponential with full jitter (``uniform(0, min(cap, base·2^k))``); ``k`` is
  reset only by a sync_response, so a target that accepts connections and then fails keeps
  backing off.
* Stale stream: no message for ``stale_after_s`` (default 3 sample intervals + 1 s) marks the
  target down (counted, health says so) but keeps the stream; only ``dead_after_s`` of silence
  (default 4 × stale, at least 10 s) ends it and re-subscribes. A target or collector that is
  merely slow (a busy control-plane CPU, a starved process) resumes the same stream: tearing it
  down made the target build a full snapshot per re-subscribe, on the CPU that was short already,
  and the 16,896-port scale run cascaded that way for minutes (six collector processes'
  streams going stale every few seconds, frames 71 % filled).
* Malformed input never ends the session: decode.py counts and skips it (``problems``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from pygnmi.spec.v080 import gnmi_pb2 as pb
from pygnmi.spec.v080 import gnmi_pb2_grpc as pbg

from collectors.gnmi.decode import TargetArrays
from collectors.gnmi.metrics import SAMPLED_KEYS
from collectors.gnmi.paths import subscription_paths

log = logging.getLogger(__name__)

STATE_KEYS = ("oper_status", "port_speed")
FIRST_SYNC_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0  # stop() gives up on a session after this (and logs it)
STOP_RECANCEL_S = 0.5  # ... re-sending the cancel this often meanwhile


@dataclass(frozen=True)
class GnmiTargetSpec:
    """How to reach one switch's gNMI target and which ports (names) to expect from it."""

    name: str
    address: str
    port: int
    port_names: tuple[str, ...]
    sample_interval_s: float = 1.0
    leaves: tuple[str, ...] = SAMPLED_KEYS  # SAMPLE leaves; oper-status/port-speed are ON_CHANGE
    insecure: bool = True  # loopback/lab; TLS via root_cert_pem
    root_cert_pem: bytes | None = field(default=None, repr=False)
    backoff_base_s: float = 0.2
    backoff_max_s: float = 5.0
    stale_after_s: float | None = None  # None = 3 × sample interval + 1 s: marked down
    dead_after_s: float | None = None  # None = 4 × stale, at least 10 s: re-subscribed


def subscribe_request(spec: GnmiTargetSpec) -> pb.SubscribeRequest:
    ns = round(spec.sample_interval_s * 1e9)
    subs = [
        pb.Subscription(path=p, mode=pb.SAMPLE, sample_interval=ns) for p in subscription_paths(spec.leaves)
    ]
    subs += [pb.Subscription(path=p, mode=pb.ON_CHANGE) for p in subscription_paths(STATE_KEYS)]
    return pb.SubscribeRequest(
        subscribe=pb.SubscriptionList(
            prefix=pb.Path(target=spec.name),
            subscription=subs,
            mode=pb.SubscriptionList.STREAM,
            encoding=pb.PROTO,
        )
    )


def backoff_delay(attempt: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Full-jitter capped exponential backoff (AWS architecture blog): never above ``cap_s``."""
    return rng.uniform(0.0, min(cap_s, base_s * (2.0 ** min(attempt, 30))))


class GnmiSession:
    """The subscription loop and decoded state of one target; ``health()`` for the live window."""

    def __init__(self, spec: GnmiTargetSpec, *, seed: int | None = None) -> None:
        self.spec = spec
        self.arrays = TargetArrays(spec.port_names)
        self._rng = random.Random(seed)
        self.attempt = 0
        self.connects = 0
        self.syncs = 0
        self.active = 0  # open Subscribe RPCs of this session (0 or 1)
        self.up = False
        self.last_success_ns = 0
        self.last_error = ""
        self.errors = 0
        self.error_counts: dict[str, int] = {}
        self.decode_ms = 0.0
        self._synced = asyncio.Event()

    # ---- the loop -------------------------------------------------------------------------
    async def run(self) -> None:
        """Subscribe until cancelled; reconnect on any loss."""
        while True:
            try:
                await self._subscribe_once()
                self._fail("stream_ended", "target closed the stream")
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as exc:
                self._fail(f"rpc_{exc.code().name.lower()}", exc.details() or exc.code().name)
            except TimeoutError:
                self._fail("dead", f"no message for {self._dead_s():.1f} s: re-subscribing")
            except Exception as exc:  # a bug or a broken target must not end the loop
                log.exception("gNMI session %s", self.spec.name)
                self._fail("internal", repr(exc))
            delay = backoff_delay(self.attempt, self.spec.backoff_base_s, self.spec.backoff_max_s, self._rng)
            self.attempt += 1
            await asyncio.sleep(delay)

    def _stale_s(self) -> float:
        return self.spec.stale_after_s or 3.0 * self.spec.sample_interval_s + 1.0

    def _dead_s(self) -> float:
        return max(self.spec.dead_after_s or max(10.0, 4.0 * self._stale_s()), self._stale_s())

    def _channel(self) -> grpc.aio.Channel:
        target = f"{self.spec.address}:{self.spec.port}"
        opts = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]
        if self.spec.insecure:
            return grpc.aio.insecure_channel(target, options=opts)
        creds = grpc.ssl_channel_credentials(root_certificates=self.spec.root_cert_pem)
        return grpc.aio.secure_channel(target, creds, options=opts)

    async def _subscribe_once(self) -> None:
        channel = self._channel()
        self.connects += 1
        self.active += 1
        try:
            stub = pbg.gNMIStub(channel)
            call = stub.Subscribe()
            await call.write(subscribe_request(self.spec))
            stale, dead = self._stale_s(), self._dead_s()
            synced = False
            while True:
                # a big target may take seconds to build its first snapshot: staleness counts
                # only once the stream has synced. asyncio.wait on a read task, not wait_for (on
                # 3.11 wait_for loses a cancel that races a message, cpython gh-86296, and the
                # session then outlives stop() forever) nor asyncio.timeout (its cancel ends the
                # RPC: a stale stream could not be kept)
                read = asyncio.ensure_future(call.read())
                limit = stale if synced else max(stale, FIRST_SYNC_TIMEOUT_S)
                try:
                    done, _ = await asyncio.wait({read}, timeout=limit)
                    if not done and synced:
                        self._mark_stale(stale)
                        done, _ = await asyncio.wait({read}, timeout=dead - stale)
                    if not done:
                        raise TimeoutError
                finally:
                    if not read.done():
                        read.cancel()
                resp = read.result()
                if resp is grpc.aio.EOF:
                    return
                synced = self._on_response(resp) or synced
        finally:
            self.active -= 1
            # bounded: a close racing a cancel must never wedge the loop (seen under load). A
            # cancel that arrives here still propagates: swallowing it kept the session alive
            # after stop() and hung the caller's loop shutdown (seen in CI).
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await asyncio.shield(channel.close(grace=None))

    def _on_response(self, resp: pb.SubscribeResponse) -> bool:
        t0 = time.perf_counter()
        kind = self.arrays.apply(resp)
        self.decode_ms = (time.perf_counter() - t0) * 1e3
        if kind == "sync":
            self.attempt = 0  # backoff resets only once the target proved it serves data
            self.syncs += 1
            self._synced.set()
        if kind in ("update", "sync"):
            self.up = True
            self.last_success_ns = time.time_ns()
        return kind == "sync"

    def _down(self, code: str, message: str) -> None:
        """Down and counted; the stream, if any, is kept: its next message brings the target up."""
        self.up = False
        self.errors += 1
        self.error_counts[code] = self.error_counts.get(code, 0) + 1
        self.last_error = f"{code}: {message}"[:200]

    def _mark_stale(self, stale_s: float) -> None:
        self._down("stale", f"no message for {stale_s:.1f} s (stream kept)")

    def _fail(self, code: str, message: str) -> None:
        """Down, the stream lost: the next one must sync again."""
        self._down(code, message)
        self._synced.clear()

    async def wait_synced(self, timeout_s: float) -> bool:
        try:
            async with asyncio.timeout(timeout_s):
                await self._synced.wait()
        except TimeoutError:
            return False
        return True

    # ---- health ---------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        """Same shape as the SNMP collector's health (live_window), plus gNMI specifics."""
        counts = dict(self.error_counts)
        for k, v in self.arrays.problems.items():
            counts[f"bad_{k}"] = v
        return {
            "up": self.up,
            "protocol": "gnmi",
            "last_success_ns": self.last_success_ns,
            "poll_ms": round(self.decode_ms, 3),
            "errors": self.errors + sum(self.arrays.problems.values()),
            "error_counts": counts,
            "last_error": self.last_error,
            "reconnects": max(0, self.connects - 1),
            "subscriptions": self.active,
            "updates": self.arrays.updates,
        }


class GnmiCollector:
    """The gNMI sessions of one shard: one per target name, started and stopped together."""

    def __init__(self, specs: Sequence[GnmiTargetSpec], *, seed: int | None = None) -> None:
        self.sessions: dict[str, GnmiSession] = {}
        for spec in specs:
            if spec.name in self.sessions:  # never two subscriptions to one target
                raise ValueError(f"gNMI target {spec.name!r} listed twice")
            self.sessions[spec.name] = GnmiSession(
                spec, seed=None if seed is None else seed + len(self.sessions)
            )
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self) -> None:
        for name, s in self.sessions.items():
            if name not in self._tasks or self._tasks[name].done():
                self._tasks[name] = asyncio.get_running_loop().create_task(s.run(), name=f"gnmi:{name}")

    async def stop(self) -> None:
        """Cancel every session and wait for it; a cancel a session lost is sent again."""
        pending = set(self._tasks.values())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_TIMEOUT_S
        while pending and loop.time() < deadline:
            for t in pending:
                t.cancel()
            _, pending = await asyncio.wait(pending, timeout=STOP_RECANCEL_S)
        for t in pending:
            log.warning("gNMI session %s did not stop within %.0f s", t.get_name(), STOP_TIMEOUT_S)
        self._tasks.clear()

    def health(self) -> dict[str, dict[str, Any]]:
        return {name: s.health() for name, s in self.sessions.items()}
