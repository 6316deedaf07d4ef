"""Walk whole MIB subtrees of any value type (strings included): discovery and LLDP, not the hot path.

The poller's :func:`collectors.snmp.v2c.walk_columns` reads only numbers straight into arrays;
inventory needs names and descriptions, so this walks with the same client (one UDP endpoint per
loop, the same retries and request-id matching) and the general BER decoder::

    GETBULK [root]  ─▶  rows of (OID, tag, value) until the agent leaves ``root``

v3 targets go through pysnmp (:mod:`collectors.snmp.engine`), as the poller's v3 path does.
Raises only :class:`SnmpPollError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pysnmp.hlapi.v3arch.asyncio import (
    ContextData,
    ObjectIdentity,
    ObjectType,
    UdpTransportTarget,
    bulk_walk_cmd,
)
from pysnmp.proto import rfc1902

from collectors.snmp import v2c
from collectors.snmp.ber import (
    END_OF_MIB_VIEW,
    EXCEPTIONS,
    GETBULK,
    Value,
    decode_oid,
    encode_oid,
    encode_request,
    iter_varbinds,
)
from collectors.snmp.engine import auth_data, loop_context
from collectors.snmp.errors import SnmpPollError
from fabricmon.core.topology.spec import SnmpSettings

Oid = tuple[int, ...]
MAX_VARBINDS = 200_000  # a runaway agent (OIDs that never leave the subtree) ends here


@dataclass(frozen=True)
class Varbind:
    """One cell of a walked subtree: its OID, BER tag and decoded value."""

    oid: Oid
    tag: int
    value: Value

    def text(self) -> str:
        """An OCTET STRING as text (UTF-8, invalid bytes replaced, NULs stripped), numbers as str."""
        if isinstance(self.value, bytes):
            return self.value.decode("utf-8", "replace").strip("\x00").strip()
        return "" if self.value is None else str(self.value)


async def walk(
    name: str, address: str, settings: SnmpSettings, roots: Sequence[Oid], *, max_repetitions: int = 25
) -> dict[Oid, list[Varbind]]:
    """Every varbind under each of ``roots`` (an empty list for a subtree the agent lacks)."""
    if settings.version == "3":
        return {root: await _walk_v3(name, address, settings, root, max_repetitions) for root in roots}
    return {root: await _walk_v2c(name, address, settings, root, max_repetitions) for root in roots}


async def _walk_v2c(
    name: str, address: str, s: SnmpSettings, root: Oid, max_repetitions: int
) -> list[Varbind]:
    family, addr = await v2c.resolve(address, s.port)
    client = await v2c.client_for(family)
    comm = s.community.encode()
    out: list[Varbind] = []
    cursor = root
    while True:
        rid = client.next_request_id()
        payload = encode_request(1, comm, GETBULK, request_id=rid, max_repetitions=max_repetitions,
                                 oids=[encode_oid(cursor)])  # fmt: skip
        data, h, _t = await client.request(addr, payload, rid, version=1, community=comm, name=name,
                                           timeout_s=s.timeout_s, retries=s.retries)  # fmt: skip
        if h.error_status:
            status = (
                v2c.ERROR_STATUS[h.error_status] if h.error_status < len(v2c.ERROR_STATUS) else h.error_status
            )
            raise SnmpPollError("agent_error", f"{name}: {status} walking {_dotted(root)}")
        rows = iter_varbinds(data, h.vb_start, h.vb_end)
        if not rows:
            raise SnmpPollError("malformed", f"{name}: empty GETBULK response walking {_dotted(root)}")
        for raw_oid, tag, value in rows:
            oid = decode_oid(raw_oid)
            if tag in EXCEPTIONS or oid[: len(root)] != root:
                return out
            if oid <= cursor:
                raise SnmpPollError(
                    "malformed", f"{name}: OID not increasing: {_dotted(oid)} after {_dotted(cursor)}"
                )
            out.append(Varbind(oid, tag, value))
            cursor = oid
        if len(out) > MAX_VARBINDS:
            raise SnmpPollError(
                "malformed", f"{name}: subtree {_dotted(root)} longer than {MAX_VARBINDS} cells"
            )


async def _walk_v3(
    name: str, address: str, s: SnmpSettings, root: Oid, max_repetitions: int
) -> list[Varbind]:
    """The same walk through pysnmp (v3 USM): rarely run, so its CPU per varbind does not matter."""
    ctx = loop_context()
    try:
        transport = await UdpTransportTarget.create((address, s.port), timeout=s.timeout_s, retries=s.retries)
        out: list[Varbind] = []
        async for err_ind, err_status, _err_index, rows in bulk_walk_cmd(
            ctx.engine,
            auth_data(s),
            transport,
            ContextData(contextName=s.v3_context.encode()),
            0,
            max_repetitions,
            ObjectType(ObjectIdentity(_dotted(root))),
            lookupMib=False,
            lexicographicMode=False,
        ):
            if err_ind:
                timed_out = "timeout" in str(err_ind).lower()
                raise SnmpPollError("timeout" if timed_out else "auth", f"{name}: {err_ind}")
            if err_status:
                raise SnmpPollError(
                    "agent_error", f"{name}: {err_status.prettyPrint()} walking {_dotted(root)}"
                )
            for oid_obj, val in rows:
                oid = tuple(oid_obj.asTuple())
                if oid[: len(root)] != root:
                    return out
                out.append(_from_pysnmp(oid, val))
            if len(out) > MAX_VARBINDS:
                raise SnmpPollError(
                    "malformed", f"{name}: subtree {_dotted(root)} longer than {MAX_VARBINDS} cells"
                )
        return out
    except SnmpPollError:
        raise
    except ValueError as exc:  # bad v3 settings (auth_data)
        raise SnmpPollError("auth", f"{name}: {exc}") from None


def _from_pysnmp(oid: Oid, val: Any) -> Varbind:
    if isinstance(val, rfc1902.OctetString):
        return Varbind(oid, 0x04, bytes(val))
    if isinstance(val, rfc1902.ObjectIdentifier):
        return Varbind(oid, 0x06, tuple(val.asTuple()))
    try:
        return Varbind(oid, 0x02, int(val))
    except (TypeError, ValueError):
        return Varbind(oid, END_OF_MIB_VIEW, None)


def _dotted(oid: Oid) -> str:
    return ".".join(map(str, oid))


def column(rows: Sequence[Varbind], prefix: Oid) -> dict[Oid, Varbind]:
    """The cells of one table column, keyed by their index (the OID after ``prefix``)."""
    n = len(prefix)
    return {vb.oid[n:]: vb for vb in rows if vb.oid[:n] == prefix and len(vb.oid) > n}
