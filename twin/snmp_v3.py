"""SNMPv3 (USM) agents: pysnmp's engine in front of the same OID table the fast v2c path serves.

One ``SnmpEngine`` for all switches (creating one costs ~0.6 s), one UDP transport per switch
(sockets bound by us so port 0 works), serving the v3 user and — for convenience — the v2c
community too. The controller finds the switch from the transport domain of the request being
processed (pysnmp's execution context "rfc3412.receiveMessage:request"; processing is
synchronous). The MIB controller follows reference/telemetry.md §2.4: GET/GETNEXT answered by
bisecting the sorted table; GETBULK is pysnmp's repetition of GETNEXT.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any

from pysnmp.carrier.asyncio.dgram import udp
from pysnmp.entity import config, engine
from pysnmp.entity.rfc3413 import cmdrsp, context
from pysnmp.proto import rfc1902, rfc1905
from pysnmp.smi import error as smi_error
from pysnmp.smi import instrum

from twin.agent_state import LiveView, SwitchAgentState
from twin.mib import Kind

AUTH = {
    "MD5": config.USM_AUTH_HMAC96_MD5,
    "SHA": config.USM_AUTH_HMAC96_SHA,
    "SHA256": config.USM_AUTH_HMAC192_SHA256,
    "NONE": config.USM_AUTH_NONE,
}
PRIV = {"DES": config.USM_PRIV_CBC56_DES, "AES": config.USM_PRIV_CFB128_AES, "NONE": config.USM_PRIV_NONE}


@dataclass(frozen=True)
class V3User:
    """The USM user every simulated switch accepts."""

    name: str = "fabricmon"
    auth_protocol: str = "SHA"
    auth_key: str = field(default="fabricmon-auth", repr=False)
    priv_protocol: str = "AES"
    priv_key: str = field(default="fabricmon-priv", repr=False)

    def __post_init__(self) -> None:
        if self.auth_protocol not in AUTH or self.priv_protocol not in PRIV:
            raise ValueError(
                f"v3 auth must be one of {sorted(AUTH)} and priv one of {sorted(PRIV)}, "
                f"got {self.auth_protocol!r}/{self.priv_protocol!r}"
            )

    @property
    def level(self) -> str:
        if self.auth_protocol == "NONE":
            return "noAuthNoPriv"
        return "authNoPriv" if self.priv_protocol == "NONE" else "authPriv"


def _pysnmp_value(state: SwitchAgentState, i: int, live: LiveView) -> Any:
    e = state.entries[i]
    if e.kind is Kind.INTEGER:
        return rfc1902.Integer32(int(e.static))
    if e.kind is Kind.STRING:
        return rfc1902.OctetString(bytes(e.static))
    if e.kind is Kind.GAUGE:
        return rfc1902.Gauge32(int(e.static))
    if e.kind is Kind.COUNTER32_ZERO:
        return rfc1902.Counter32(0)
    if e.kind is Kind.COUNTER64:
        return rfc1902.Counter64(live.counters[e.arg])
    if e.kind is Kind.COUNTER32:
        return rfc1902.Counter32(live.counters[e.arg] & 0xFFFFFFFF)
    if e.kind is Kind.UPTIME:
        return rfc1902.TimeTicks(live.uptime_ticks)
    return rfc1902.TimeTicks(live.discontinuity_ticks[e.arg])


class SwitchMibController(instrum.AbstractMibInstrumController):  # type: ignore[misc]
    """GET/GETNEXT for the switch whose UDP transport received the request being answered."""

    def __init__(self, engine_: Any, by_domain: dict[tuple[int, ...], SwitchAgentState]) -> None:
        self.engine, self.by_domain = engine_, by_domain

    def _state(self) -> SwitchAgentState:
        ctx = self.engine.observer.get_execution_context("rfc3412.receiveMessage:request")
        return self.by_domain[tuple(ctx["transportDomain"])]

    def read_variables(self, *var_binds: Any, **ctx: Any) -> list[Any]:
        state = self._state()
        live = state.live()
        out = []
        for name, _ in var_binds:
            i = state.exact(tuple(name))
            if i >= 0:
                out.append((name, _pysnmp_value(state, i, live)))
            elif state.is_known_object(tuple(name)):
                out.append((name, rfc1905.noSuchInstance))
            else:
                out.append((name, rfc1905.noSuchObject))
        return out

    def read_next_variables(self, *var_binds: Any, **ctx: Any) -> list[Any]:
        state = self._state()
        live = state.live()
        out = []
        for name, _ in var_binds:
            i = state.after(tuple(name))
            if i < len(state.entries):
                out.append((rfc1902.ObjectName(state.entries[i].oid), _pysnmp_value(state, i, live)))
            else:
                out.append((name, rfc1905.endOfMibView))
        return out

    def write_variables(self, *var_binds: Any, **ctx: Any) -> list[Any]:
        raise smi_error.NotWritableError(name=var_binds[0][0] if var_binds else None)


class UnreachableGate:
    """Drops every datagram while the switch is marked unreachable (wraps pysnmp's receive path)."""

    def __init__(self, state: SwitchAgentState, transport: Any) -> None:
        inner = transport.datagram_received

        def gated(datagram: bytes, address: Any) -> None:
            if not state.unreachable:
                inner(datagram, address)

        transport.datagram_received = gated


def start_v3_agents(
    agents: list[tuple[SwitchAgentState, socket.socket]], community: str, user: V3User
) -> Any:
    """Serve every (state, bound socket) from one engine; call inside the running event loop."""
    e = engine.SnmpEngine()
    by_domain: dict[tuple[int, ...], SwitchAgentState] = {}
    for k, (state, sock) in enumerate(agents):
        transport = udp.UdpTransport().open_server_mode(sock=sock)
        UnreachableGate(state, transport)
        domain = (*udp.DOMAIN_NAME, k + 1)
        config.add_transport(e, domain, transport)
        by_domain[domain] = state
    config.add_v1_system(e, "twin-area", community)
    config.add_vacm_user(e, 2, "twin-area", "noAuthNoPriv", (1, 3, 6), (1, 3, 6))
    config.add_v3_user(
        e,
        user.name,
        authProtocol=AUTH[user.auth_protocol],
        authKey=user.auth_key if user.auth_protocol != "NONE" else None,
        privProtocol=PRIV[user.priv_protocol],
        privKey=user.priv_key if user.priv_protocol != "NONE" else None,
    )
    config.add_vacm_user(e, 3, user.name, user.level, (1, 3, 6), (1, 3, 6))
    ctx = context.SnmpContext(e)
    ctx.unregister_context_name(b"")
    ctx.register_context_name(b"", SwitchMibController(e, by_domain))
    cmdrsp.GetCommandResponder(e, ctx)
    cmdrsp.NextCommandResponder(e, ctx)
    cmdrsp.BulkCommandResponder(e, ctx).max_varbinds = 256
    return e
