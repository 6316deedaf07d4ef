"""One pysnmp ``SnmpEngine`` per running event loop, with the per-target objects it needs.

pysnmp 7 hangs when an engine is reused across ``asyncio.run()`` calls, and each new engine pays
~0.45 s of warm-up (reference/telemetry.md §1.5). So the engine is bound to the loop that created
it: :func:`loop_context` returns the one for the running loop, creating it on first use; a new
loop gets a new engine, a closed loop's engine is garbage with it.

The context also watches the engine's receive path: pysnmp silently drops a datagram that is not
BER it can parse (and the request then just times out). We count such datagrams per source
address, so a timeout caused by a garbage-answering agent is reported as ``malformed``, and stamp
each datagram's arrival per source address *before* pysnmp decodes it (~150-230 µs per varbind:
the response callback fires tens of ms after the answer arrived for a big table).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pysnmp.hlapi.v3arch.asyncio import (
    USM_AUTH_HMAC96_MD5,
    USM_AUTH_HMAC96_SHA,
    USM_AUTH_HMAC128_SHA224,
    USM_AUTH_HMAC192_SHA256,
    USM_AUTH_HMAC256_SHA384,
    USM_AUTH_HMAC384_SHA512,
    USM_AUTH_NONE,
    USM_PRIV_CBC56_DES,
    USM_PRIV_CBC168_3DES,
    USM_PRIV_CFB128_AES,
    USM_PRIV_CFB192_AES,
    USM_PRIV_CFB256_AES,
    USM_PRIV_NONE,
    CommunityData,
    SnmpEngine,
    UdpTransportTarget,
    UsmUserData,
)
from pysnmp.hlapi.v3arch.asyncio.cmdgen import LCD

from collectors.snmp.v2c import close_clients
from fabricmon.core.topology.spec import SnmpSettings

AUTH_PROTOCOLS: dict[str, Any] = {
    "NONE": USM_AUTH_NONE,
    "MD5": USM_AUTH_HMAC96_MD5,
    "SHA": USM_AUTH_HMAC96_SHA,
    "SHA224": USM_AUTH_HMAC128_SHA224,
    "SHA256": USM_AUTH_HMAC192_SHA256,
    "SHA384": USM_AUTH_HMAC256_SHA384,
    "SHA512": USM_AUTH_HMAC384_SHA512,
}
PRIV_PROTOCOLS: dict[str, Any] = {
    "NONE": USM_PRIV_NONE,
    "DES": USM_PRIV_CBC56_DES,
    "3DES": USM_PRIV_CBC168_3DES,
    "AES": USM_PRIV_CFB128_AES,
    "AES128": USM_PRIV_CFB128_AES,
    "AES192": USM_PRIV_CFB192_AES,
    "AES256": USM_PRIV_CFB256_AES,
}


def auth_data(settings: SnmpSettings) -> CommunityData | UsmUserData:
    """pysnmp credentials for ``settings``. v3 always names both protocols explicitly: pysnmp
    would otherwise silently pick MD5 and DES when only keys are given."""
    if settings.version == "2c":
        return CommunityData(settings.community, mpModel=1)
    auth = settings.v3_auth_protocol.upper().replace("-", "")
    priv = settings.v3_priv_protocol.upper().replace("-", "")
    if auth not in AUTH_PROTOCOLS:
        raise ValueError(f"unknown SNMPv3 auth protocol {settings.v3_auth_protocol!r}")
    if priv not in PRIV_PROTOCOLS:
        raise ValueError(f"unknown SNMPv3 priv protocol {settings.v3_priv_protocol!r}")
    if auth != "NONE" and not settings.v3_auth_key:
        raise ValueError(f"SNMPv3 user {settings.v3_user!r}: auth protocol {auth} needs v3_auth_key")
    if priv != "NONE" and not settings.v3_priv_key:
        raise ValueError(f"SNMPv3 user {settings.v3_user!r}: priv protocol {priv} needs v3_priv_key")
    return UsmUserData(
        settings.v3_user,
        authKey=settings.v3_auth_key or None,
        privKey=settings.v3_priv_key or None,
        authProtocol=AUTH_PROTOCOLS[auth],
        privProtocol=PRIV_PROTOCOLS[priv],
    )


@dataclass
class LoopContext:
    """The engine of one event loop, its configured targets, and bad-datagram counts per peer."""

    engine: SnmpEngine
    target_names: dict[tuple[object, ...], str] = field(default_factory=dict)
    bad_datagrams: Counter[tuple[str, int]] = field(default_factory=Counter)
    last_rx_ns: dict[tuple[str, int], int] = field(default_factory=dict)  # Unix-epoch ns per peer
    _wrapped: bool = False

    async def target_name(self, address: str, port: int, settings: SnmpSettings) -> str:
        """The engine's name for (address, port, credentials), configured once and then reused:
        building transport/auth objects per request is measurable CPU in pysnmp."""
        key = (address, port, settings)
        name = self.target_names.get(key)
        if name is None:
            transport = await UdpTransportTarget.create(
                (address, port), timeout=settings.timeout_s, retries=settings.retries
            )
            name, _params = LCD.configure(self.engine, auth_data(settings), transport, b"")
            self.target_names[key] = name
            self._watch_receive_path()
        return name

    def _watch_receive_path(self) -> None:
        if self._wrapped:
            return
        dispatcher = self.engine.message_dispatcher
        original = dispatcher.receive_message
        counters = [
            self.engine.get_mib_builder().import_symbols("__SNMPv2-MIB", name)[0]
            for name in ("snmpInASNParseErrs", "snmpInBadVersions")
        ]
        bad = self.bad_datagrams
        rx = self.last_rx_ns

        def receive_message(engine: Any, domain: Any, address: Any, whole_msg: bytes) -> Any:
            rx[(str(address[0]), int(address[1]))] = time.time_ns()
            before = sum(int(c.syntax) for c in counters)
            try:
                return original(engine, domain, address, whole_msg)
            except Exception:  # a decoder bug must not kill the engine's receive path
                bad[(str(address[0]), int(address[1]))] += 1
                return b""
            finally:
                if sum(int(c.syntax) for c in counters) != before:
                    bad[(str(address[0]), int(address[1]))] += 1

        dispatcher.receive_message = receive_message
        self._wrapped = True

    def close(self) -> None:
        if self.engine.transport_dispatcher is not None:
            self.engine.close_dispatcher()


_contexts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopContext] = weakref.WeakKeyDictionary()


def loop_context() -> LoopContext:
    """The :class:`LoopContext` of the running loop (created on first use)."""
    loop = asyncio.get_running_loop()
    ctx = _contexts.get(loop)
    if ctx is None:
        ctx = LoopContext(SnmpEngine())
        _contexts[loop] = ctx
    return ctx


def close_loop_context() -> None:
    """Close the running loop's engine and fast v2c endpoints (their UDP sockets); call before
    the loop ends."""
    close_clients()
    ctx = _contexts.pop(asyncio.get_running_loop(), None)
    if ctx is not None:
        ctx.close()
