"""Our own SNMP v2c (and v3, with :mod:`~collectors.snmp.usm`) client over asyncio UDP: the fast
path of :class:`~collectors.snmp.SnmpPoller`.

One unconnected UDP endpoint per event loop and address family serves every v2c target polled
from that loop; responses find their request by request-id::

    walk(target A) ─┐                       ┌─▶ pending[rid] future of A   (rid, source, community,
    walk(target B) ─┼─ sendto ─▶ [socket] ──┤                               version all checked)
    walk(target C) ─┘                       └─▶ unparseable / unknown rid from a polled agent:
                                                its oldest pending request fails 'malformed'

Per request: ``timeout_s`` then a resend with the same request-id, ``retries`` times (a late
answer to an earlier try is as good as the new one). Each answer carries its read time: the
midpoint of the last send and the receipt, the best client-side guess of when the agent read the
values it holds (the agent reads once per request; a walk spans many requests). The receipt is
the kernel's arrival stamp of the datagram (Linux ``SIOCGSTAMPNS``), not when our loop got to it:
a loop busy decoding other switches' answers (or a GIL shared with other collector threads)
otherwise adds its delay to the round trip — measured up to 44 ms on a loaded 2-core box. Decoding is
:mod:`collectors.snmp.ber`: no pysnmp, no pyasn1 — about a tenth of the CPU per varbind (bench/snmp_poll.py).

SNMPv3 requests go through the same endpoint: their msgID is the request-id, the answer is
authenticated and decrypted on arrival by the target's :class:`~collectors.snmp.usm.UsmSession`
and then read like a v2c one; the agent's Reports (unknown engine id, time window, wrong digest…)
are answered or turned into a named ``auth`` error by :func:`walk_columns`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import random
import socket
import struct
import time
import weakref
from array import array

try:
    import fcntl
except ImportError:  # not POSIX: receipt = when the loop reads the datagram
    fcntl = None  # type: ignore[assignment]
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.snmp import usm
from collectors.snmp.ber import (
    GET,
    GETBULK,
    REPORT,
    RESPONSE,
    TIMETICKS,
    ColumnDecoder,
    ResponseHeader,
    encode_oid,
    encode_pdu,
    encode_request,
    iter_varbinds,
    parse_header,
    read_tlv,
)
from collectors.snmp.errors import SnmpPollError
from fabricmon.core.topology.spec import SnmpSettings

Address = tuple[str, int]
# (datagram, its header, read time): the read time is the Unix-epoch midpoint of the latest send of
# the request and the receipt of this answer (a late answer to an earlier try is thus stamped up
# to one timeout late; with retries off the happy path that is the rare, bounded case).
Answer = tuple[bytes, ResponseHeader, int]
ERROR_STATUS = ("noError", "tooBig", "noSuchName", "badValue", "readOnly", "genErr", "noAccess",
                "wrongType", "wrongLength", "wrongEncoding", "wrongValue", "noCreation",
                "inconsistentValue", "resourceUnavailable", "commitFailed", "undoFailed",
                "authorizationError", "notWritable", "inconsistentName")  # fmt: skip
_RECENT_IDS = 4096  # answered/expired request-ids remembered: their late copies are not an error
_SIOCGSTAMPNS = 0x8907  # Linux: timespec of the last datagram handed to us (64-bit time_t)
_TIMESPEC = struct.Struct("qq")


@dataclass
class _Pending:
    """One request in flight: where it went, what must come back, and its resend timer."""

    future: asyncio.Future[Answer]
    addr: Address
    payload: bytes
    version: int
    community: bytes
    name: str
    timeout_s: float
    tries_left: int
    timer: asyncio.TimerHandle | None = None
    sent_ns: int = 0  # Unix-epoch ns of the latest (re)send
    usm: usm.UsmSession | None = None  # SNMPv3: checks and decrypts the answer


class V2cClient(asyncio.DatagramProtocol):
    """The shared endpoint: sends requests, matches responses, times out and resends."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.DatagramTransport | None = None
        self.pending: dict[int, _Pending] = {}
        self.by_addr: dict[Address, dict[int, None]] = {}  # request-ids per agent, oldest first
        self.recent: dict[int, None] = {}
        self.stray = 0  # late duplicates and datagrams from nobody we are polling
        self._fd = -1  # the socket, for kernel receive stamps (-1: none, use the clock)
        self._ids = itertools.count(random.randrange(1, 2**30))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if fcntl is not None and sock is not None:
            self._fd = sock.fileno()

    def _arrival_ns(self, now_ns: int) -> int:
        """When the kernel received the datagram just read (falls back to ``now_ns``)."""
        if self._fd < 0:
            return now_ns
        try:
            sec, nsec = _TIMESPEC.unpack(fcntl.ioctl(self._fd, _SIOCGSTAMPNS, bytes(_TIMESPEC.size)))
        except (OSError, struct.error):  # ENOENT before the first stamped datagram; other kernels
            return now_ns
        stamp = sec * 1_000_000_000 + nsec
        return stamp if now_ns - 10**9 < stamp <= now_ns else now_ns

    def connection_lost(self, exc: Exception | None) -> None:
        for rid in list(self.pending):
            self._finish(rid, SnmpPollError("timeout", f"{self.pending[rid].name}: socket closed ({exc})"))

    def error_received(self, exc: Exception) -> None:  # ICMP errors on an unconnected socket: rare
        self.stray += 1

    def next_request_id(self) -> int:
        return next(self._ids) % (2**31 - 1) + 1

    def request(
        self, addr: Address, payload: bytes, request_id: int, *, version: int, community: bytes,
        name: str, timeout_s: float, retries: int, session: usm.UsmSession | None = None,
    ) -> asyncio.Future[Answer]:  # fmt: skip
        """Send ``payload`` (which carries ``request_id``, as msgID for v3); the future gets
        (datagram or v3 plaintext, header, read time in Unix-epoch ns)."""
        if self.transport is None or self.transport.is_closing():
            raise SnmpPollError("timeout", f"{name}: the client's socket is closed")
        p = _Pending(self.loop.create_future(), addr, payload, version, community, name, timeout_s, retries,
                     usm=session)  # fmt: skip
        self.pending[request_id] = p
        self.by_addr.setdefault(addr, {})[request_id] = None
        self._send(request_id, p)
        return p.future

    def _send(self, rid: int, p: _Pending) -> None:
        assert self.transport is not None
        p.sent_ns = time.time_ns()
        self.transport.sendto(p.payload, p.addr)
        p.timer = self.loop.call_later(p.timeout_s, self._expire, rid)

    def _expire(self, rid: int) -> None:
        p = self.pending.get(rid)
        if p is None:
            return
        if p.tries_left > 0 and not p.future.done():
            p.tries_left -= 1
            self._send(rid, p)
            return
        self._finish(rid, SnmpPollError("timeout", f"{p.name}: no response from {p.addr[0]}:{p.addr[1]} "
                                                   f"within {p.timeout_s:g} s"))  # fmt: skip

    def _finish(self, rid: int, result: Answer | SnmpPollError) -> None:
        p = self.pending.pop(rid)
        if p.timer is not None:
            p.timer.cancel()
        waiting = self.by_addr.get(p.addr)
        if waiting is not None:
            waiting.pop(rid, None)
            if not waiting:
                del self.by_addr[p.addr]
        self.recent[rid] = None
        if len(self.recent) > _RECENT_IDS:
            del self.recent[next(iter(self.recent))]
        if p.future.done():
            return
        if isinstance(result, SnmpPollError):
            p.future.set_exception(result)
        else:
            p.future.set_result(result)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        received_ns = self._arrival_ns(time.time_ns())
        source: Address = (str(addr[0]), int(str(addr[1])))
        waiting = self.by_addr.get(source)
        if not waiting:
            self.stray += 1  # nobody we are polling (or a late answer after the poll ended)
            return
        if usm.is_v3(data):
            self._v3_received(data, source, waiting, received_ns)
            return
        try:
            header = parse_header(data)
        except SnmpPollError as exc:
            rid = next(iter(waiting))
            self._fail(rid, f"unparseable response: {exc.message}")
            return
        p = self.pending.get(header.request_id)
        if p is None or p.addr != source:
            if header.request_id in self.recent:
                self.stray += 1  # a late copy of an answered or retried request
                return
            self._fail(next(iter(waiting)), f"response request-id {header.request_id} matches no request")
            return
        if header.pdu != RESPONSE:
            self._fail(header.request_id, f"PDU type 0x{header.pdu:02x} is not a Response")
        elif header.version != p.version:
            self._fail(header.request_id, f"response version {header.version}, sent {p.version}")
        elif header.community != p.community:
            self._fail(header.request_id, "response echoes a different community")
        else:
            self._finish(header.request_id, (data, header, (p.sent_ns + received_ns) // 2))

    def _v3_received(self, data: bytes, source: Address, waiting: dict[int, None], received_ns: int) -> None:
        msg_id = usm.msg_id_of(data)
        p = None if msg_id is None else self.pending.get(msg_id)
        if msg_id is None or p is None or p.addr != source:
            if msg_id is not None and msg_id in self.recent:
                self.stray += 1
                return
            self._fail(next(iter(waiting)), f"SNMPv3 message (msgID {msg_id}) matches no request")
            return
        if p.usm is None:
            self._fail(msg_id, "an SNMPv3 answer to a v2c request")
            return
        try:
            plain, header = p.usm.open(data, p.name)
        except SnmpPollError as exc:
            self._finish(msg_id, exc)
            return
        if header.pdu not in (RESPONSE, REPORT):
            self._fail(msg_id, f"PDU type 0x{header.pdu:02x} is not a Response")
        elif header.pdu == RESPONSE and header.request_id != msg_id:
            self._fail(msg_id, f"request-id {header.request_id} in a message with msgID {msg_id}")
        else:
            self._finish(msg_id, (plain, header, (p.sent_ns + received_ns) // 2))

    def _fail(self, rid: int, what: str) -> None:
        self._finish(rid, SnmpPollError("malformed", f"{self.pending[rid].name}: {what}"))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Future[V2cClient]]] = (
    weakref.WeakKeyDictionary()
)
_resolved: dict[tuple[str, int], tuple[int, Address]] = {}


async def client_for(family: int) -> V2cClient:
    """The running loop's endpoint for ``family`` (AF_INET / AF_INET6), created on first use."""
    loop = asyncio.get_running_loop()
    per_loop = _clients.setdefault(loop, {})
    made = per_loop.get(family)
    if made is None or (made.done() and not _usable(made)):
        made = per_loop[family] = loop.create_future()
        try:
            local = (
                ("::", 0) if family == socket.AF_INET6 else ("0.0.0.0", 0)
            )  # client side: any local address
            _t, client = await loop.create_datagram_endpoint(lambda: V2cClient(loop), local_addr=local)
            made.set_result(client)
        except OSError as exc:
            del per_loop[family]  # the next poll tries again
            made.set_exception(SnmpPollError("timeout", f"cannot open a UDP socket: {exc}"))
    return await asyncio.shield(made)


def _usable(made: asyncio.Future[V2cClient]) -> bool:
    if made.cancelled() or made.exception() is not None:
        return False
    transport = made.result().transport
    return transport is not None and not transport.is_closing()


def close_clients() -> None:
    """Close the running loop's endpoints (their sockets); call before the loop ends."""
    for made in _clients.pop(asyncio.get_running_loop(), {}).values():
        if made.done() and _usable(made):
            made.result().close()


async def resolve(address: str, port: int) -> tuple[int, Address]:
    """(family, (ip, port)) of a target; names are looked up once, answers come from the IP."""
    key = (address, port)
    if key not in _resolved:
        try:
            ip = ipaddress.ip_address(address)
            family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            _resolved[key] = (family, (str(ip), port))
        except ValueError:
            infos = await asyncio.get_running_loop().getaddrinfo(address, port, type=socket.SOCK_DGRAM)
            if not infos:
                raise SnmpPollError("timeout", f"{address}: no address") from None
            family, _, _, _, sockaddr = infos[0]
            _resolved[key] = (int(family), (str(sockaddr[0]), int(sockaddr[1])))
    return _resolved[key]


@dataclass
class FastWalk:
    """A finished multi-column walk: per column its ifIndex (int64), values (uint64) and, per
    cell, the read time (Unix-epoch ns, int64) of the response that carried it."""

    index: list[npt.NDArray[np.int64]]
    values: list[npt.NDArray[np.uint64]]
    read_ns: list[npt.NDArray[np.int64]]
    uptime_ticks: int | None
    uptime_ok: bool
    bad_cells: int
    varbinds: int


async def walk_columns(
    name: str, address: str, port: int, *, community: str, columns: Sequence[Sequence[int]],
    kinds: Sequence[str], uptime_oid: Sequence[int], max_repetitions: int, timeout_s: float,
    retries: int, max_cells: int, v3: SnmpSettings | None = None,
) -> FastWalk:  # fmt: skip
    """Walk ``columns`` in lock-step with GETBULK (``uptime_oid`` as the first request's
    non-repeater, answered by its GETNEXT, i.e. ``.0``): v2c with ``community``, or SNMPv3 as
    ``v3``'s user (protocols :func:`usm.fast_path_supports`); raises only :class:`SnmpPollError`."""
    family, addr = await resolve(address, port)
    client = await client_for(family)
    exchange = _Exchange(client, addr, name, community.encode(), timeout_s, retries,
                         None if v3 is None else session_for(addr, v3))  # fmt: skip
    dec = ColumnDecoder(columns, kinds)
    want_uptime = encode_oid((*uptime_oid, 0))
    active = list(range(len(columns)))
    uptime: int | None = None
    uptime_ok = False
    varbinds = 0
    first = True
    # Per column, the read time of each good cell. Columns of one row need not share a response
    # (an agent may cut a GETBULK answer mid-row, or skip a cell in one column), so per column.
    read_ns = [array("q") for _ in columns]
    while active:
        head = [encode_oid(uptime_oid)] if first else []
        oids = head + [dec.cursor[i] for i in active]
        data, h, t_ns = await exchange.getbulk(oids, len(head), max_repetitions)
        if h.error_status:
            status = ERROR_STATUS[h.error_status] if h.error_status < len(ERROR_STATUS) else h.error_status
            raise SnmpPollError("agent_error", f"{name}: {status} at varbind {h.error_index}")
        pos = h.vb_start
        if first:
            first = False
            if pos < h.vb_end:
                pos, (oid, tag, value) = _first_varbind(data, pos, h.vb_end)
                varbinds += 1
                uptime_ok = oid == want_uptime and tag == TIMETICKS and isinstance(value, int)
                uptime = value if uptime_ok and isinstance(value, int) else None
        if pos >= h.vb_end:
            raise SnmpPollError("malformed", f"{name}: empty GETBULK response")
        had = [len(dec.index[i]) for i in active]
        count, moved, done = dec.absorb(data, pos, h.vb_end, active)
        for i, k in zip(active, had, strict=True):  # per column, not per cell
            read_ns[i].extend(array("q", (t_ns,)) * (len(dec.index[i]) - k))
        varbinds += count
        if not moved and not done:
            raise SnmpPollError("malformed", f"{name}: GETBULK response made no progress")
        active = [i for i in active if i not in done]
        if sum(map(len, dec.index)) > max_cells:
            raise SnmpPollError("malformed", f"{name}: table longer than {max_cells} cells")
    return FastWalk(
        index=[np.frombuffer(a, dtype=np.int64) if len(a) else np.zeros(0, np.int64) for a in dec.index],
        values=[np.frombuffer(a, dtype=np.uint64) if len(a) else np.zeros(0, np.uint64) for a in dec.values],
        read_ns=[np.frombuffer(a, dtype=np.int64) if len(a) else np.zeros(0, np.int64) for a in read_ns],
        uptime_ticks=uptime,
        uptime_ok=uptime_ok,
        bad_cells=dec.bad_cells,
        varbinds=varbinds,
    )


_sessions: dict[tuple[Address, SnmpSettings], usm.UsmSession] = {}
_MAX_SESSIONS = 65536  # (agent, user) pairs: far above any fleet; a bound, not a cache policy
_REPORT_HINTS = {
    "unknownUserName": "the agent has no such user",
    "wrongDigest": "wrong auth key or auth protocol",
    "decryptionError": "wrong priv key or priv protocol",
    "unsupportedSecLevel": "the user may not use this security level",
    "notInTimeWindow": "the agent's clock keeps moving away (engine time)",
}


def session_for(addr: Address, settings: SnmpSettings) -> usm.UsmSession:
    """The USM state of (agent, user): kept across polls, so discovery happens once per agent."""
    key = (addr, settings)
    session = _sessions.get(key)
    if session is None:
        if len(_sessions) >= _MAX_SESSIONS:  # settings edited many times over: drop the oldest
            del _sessions[next(iter(_sessions))]
        session = _sessions[key] = usm.UsmSession.from_settings(settings)
    return session


@dataclass
class _Exchange:
    """One walk's requests: v2c with the community, or v3 through the target's USM session
    (discovering the agent's engine first, resending once on unknownEngineID/notInTimeWindow)."""

    client: V2cClient
    addr: Address
    name: str
    community: bytes
    timeout_s: float
    retries: int
    session: usm.UsmSession | None

    async def getbulk(self, oids: list[bytes], non_repeaters: int, max_repetitions: int) -> Answer:
        rid = self.client.next_request_id()
        if self.session is None:
            payload = encode_request(1, self.community, GETBULK, request_id=rid, non_repeaters=non_repeaters,
                                     max_repetitions=max_repetitions, oids=oids)  # fmt: skip
            return await self._send(payload, rid, 1)
        s = self.session

        def pdu(rid: int) -> bytes:
            return encode_pdu(GETBULK, request_id=rid, non_repeaters=non_repeaters,
                              max_repetitions=max_repetitions, oids=oids)  # fmt: skip

        for attempt in range(3):
            if not s.discovered:
                await self._discover()
            try:
                answer = await self._send(s.request(rid, pdu(rid)), rid, 3)
            except SnmpPollError as exc:
                if exc.kind != "timeout" or s.priv == "NONE" or s.verified:
                    raise
                answer = await self._explain_silence(exc, pdu)
            data, h, _t = answer
            if h.pdu != REPORT:
                return answer
            word = usm.report_name(data, h)
            if word not in usm.RECOVERABLE or attempt == 2:
                hint = f" ({_REPORT_HINTS[word]})" if word in _REPORT_HINTS else ""
                user = s.user.decode(errors="replace")
                raise SnmpPollError("auth", f"{self.name}: agent reports {word} for user {user!r}{hint}")
            rid = self.client.next_request_id()
        raise AssertionError("unreachable")

    async def _discover(self) -> None:
        """RFC 3414 §4: an empty noAuthNoPriv GET; the agent's Report carries its engine id,
        boots and time, which the session takes."""
        assert self.session is not None
        rid = self.client.next_request_id()
        payload = self.session.discovery_request(rid, encode_pdu(GET, request_id=rid, oids=[]))
        data, h, _t = await self._send(payload, rid, 3)
        if not self.session.discovered:
            what = usm.report_name(data, h) if h.pdu == REPORT else f"PDU 0x{h.pdu:02x}"
            raise SnmpPollError("auth", f"{self.name}: engine-id discovery answered by {what}, no engine id")

    async def _explain_silence(self, timeout: SnmpPollError, pdu: Callable[[int], bytes]) -> Answer:
        """No answer to authPriv requests of a session whose keys never worked yet. An agent that
        cannot decrypt a request drops it without a Report (net-snmp: "error parsing ScopedPDU"),
        but an agent's first authPriv request after start can also be slow (it derives the user's
        keys then: ~0.4 s seen). So: if the agent answers discovery at once, ask once more with
        a patient timeout; silent again means the priv key is what is wrong."""
        assert self.session is not None
        rid = self.client.next_request_id()
        probe = self.session.discovery_request(rid, encode_pdu(GET, request_id=rid, oids=[]))
        try:
            await self._send(probe, rid, 3)
        except SnmpPollError:
            raise timeout from None  # the agent is silent to everything: a plain timeout
        rid = self.client.next_request_id()
        try:
            return await self._send(self.session.request(rid, pdu(rid)), rid, 3,
                                    timeout_s=max(1.0, 4 * self.timeout_s), retries=0)  # fmt: skip
        except SnmpPollError as exc:
            if exc.kind != "timeout":
                raise
        raise SnmpPollError("auth", f"{self.name}: the agent answers engine discovery but not authPriv "
                                    f"requests of user {self.session.user.decode(errors='replace')!r} "
                                    "(wrong priv key or priv protocol: it drops what it cannot decrypt)")

    def _send(self, payload: bytes, rid: int, version: int, *, timeout_s: float | None = None,
              retries: int | None = None) -> asyncio.Future[Answer]:  # fmt: skip
        return self.client.request(
            self.addr, payload, rid, version=version, community=self.community, name=self.name,
            timeout_s=self.timeout_s if timeout_s is None else timeout_s,
            retries=self.retries if retries is None else retries, session=self.session,
        )  # fmt: skip


def _first_varbind(data: bytes, pos: int, end: int) -> tuple[int, tuple[bytes, int, object]]:
    """The first varbind (sysUpTime.0) read by the general decoder, and where the next begins."""
    _tag, _s, stop = read_tlv(data, pos, end)
    (vb,) = iter_varbinds(data, pos, stop)
    return stop, vb
