"""Poll a switch's IF-MIB counters with multi-column GETBULK, into numpy arrays.

One poll = one walk of all :data:`~collectors.snmp.oids.COLUMNS` in lock-step (one GETBULK
carries every still-active column x ``max_repetitions`` rows), with ``sysUpTime.0`` riding as a
non-repeater in the first request, so a 64-port leaf costs ~3 round trips::

    GETBULK nonRep=1 maxRep=R  [sysUpTime, col1, col2, … col10]  ─▶ agent
    ◀─ sysUpTime, R x (col1 … col10) row-major                         (cursor per column advances)
    GETBULK nonRep=0 maxRep=R  [cursor1, …]                       ─▶ until every column leaves its prefix

Failures never escape as foreign exceptions: :meth:`SnmpPoller.poll` raises only
:class:`SnmpPollError` (kind ``timeout`` / ``auth`` / ``malformed`` / ``agent_error``), and
:meth:`SnmpPoller.poll_many` returns it in place of that target's snapshot.

Columns are read per *cell*, not per row (issue 14): a port is every ifIndex any column served; a
missing or bad cell (wrong type, odd index — counted in :data:`PARSE_ERRORS`) is a gap in that
metric of that port only (``IfSnapshot.valid``), never a lost port. The HC octet/packet counters
are used where served, else the 32-bit ifTable ones (``IfSnapshot.counter_bits`` says which, per
port), and the speed is ifHighSpeed, else ifSpeed (``IfSnapshot.speed_bps``). The fallback columns
are walked only while the target's last poll had a port without the HC cell, so a switch that
serves ifXTable in full costs no extra varbinds::

    poll 1: COLUMNS + FALLBACK_COLUMNS   (nothing known about the switch yet)
    poll n: COLUMNS + the fallbacks whose HC column had a hole in poll n-1

ifName (an OCTET STRING, which the counter walk does not decode) is read by :meth:`SnmpPoller.names`,
rarely: when a collector starts and when the agent restarted or its ifIndex set changed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pyasn1.type.univ import Null
from pysnmp.entity.rfc3413 import cmdgen
from pysnmp.proto import errind, rfc1902, rfc1905

from collectors.snmp import ber, usm, v2c
from collectors.snmp.engine import LoopContext, loop_context
from collectors.snmp.errors import PARSE_ERRORS, SnmpPollError
from collectors.snmp.oids import (
    COLUMNS,
    COUNTER_KEYS,
    COUNTER_WIDTH_BITS,
    FALLBACK_COLUMNS,
    FALLBACK_FOR,
    IF_DESCR,
    IF_NAME,
    IF_SPEED_MAX,
    SYS_UPTIME,
    Column,
    dotted,
)
from fabricmon.core.telemetry.rates import align_ports
from fabricmon.core.topology.spec import SnmpSettings

_KIND_TYPES: dict[str, type | tuple[type, ...]] = {
    "counter64": rfc1902.Counter64,
    "counter32": rfc1902.Counter32,
    "gauge32": (rfc1902.Gauge32, rfc1902.Unsigned32),  # one tag, two classes
    "integer": rfc1902.Integer32,  # the decoder yields rfc1902.Integer, a subclass
    "timeticks": rfc1902.TimeTicks,
}
_END = (rfc1905.EndOfMibView, rfc1905.NoSuchObject, rfc1905.NoSuchInstance)
_AUTH_ERRORS = (
    errind.UnknownUserName,
    errind.WrongDigest,
    errind.DecryptionError,
    errind.AuthenticationError,
    errind.AuthenticationFailure,
    errind.UnknownSecurityName,
    errind.UnsupportedSecurityLevel,
    errind.NotInTimeWindow,
    errind.UnknownCommunityName,
    errind.UnsupportedAuthProtocol,
    errind.UnsupportedPrivProtocol,
    errind.NoEncryption,
    errind.NoAuthentication,
)
_NULL = Null("")
MAX_ROWS = 1_000_000  # a walk longer than this is an agent looping on us


@dataclass(frozen=True)
class SnmpTarget:
    """One switch's SNMP agent. ``port`` overrides ``settings.port`` (tests use ephemeral ports)."""

    name: str
    address: str
    port: int
    settings: SnmpSettings

    def __post_init__(self) -> None:
        s = self.settings
        if s.timeout_s * (s.retries + 1) >= s.interval_s:
            raise ValueError(
                f"{self.name}: timeout_s x (retries + 1) = {s.timeout_s * (s.retries + 1):g} s must be "
                f"below interval_s = {s.interval_s:g} s, or one dead switch delays the next poll"
            )


@dataclass(frozen=True)
class IfSnapshot:
    """One read of a switch's interface table, one array element per ifIndex (sorted).

    ``counters`` holds uint64 arrays: "in_octets", "out_octets", "in_pkts", "out_pkts" (Counter64)
    and "in_discards", "out_discards", "in_errors" (Counter32 values); a column the agent does not
    serve is absent. ``ts_ns`` is the Unix-epoch midpoint of the first request and last response.

    ``cell_ts_ns`` (same keys as ``counters``, int64 per port, Unix-epoch ns) is when each cell was
    read: the midpoint of the send and receipt of the response that carried it. A walk spans
    several round trips (a 64-port leaf: ~3; under load 17-300 ms in all), and the agent reads its
    counters as each request arrives, so rates must use these, not the poll's one ``ts_ns``.
    Columns of one row may come from different responses, hence one array per column.

    Per cell: ``valid`` (same keys as ``counters``) marks the ports whose cell was served and
    well-typed (a counter's value is 0 where it is not: never use it without this mask; ``None``:
    every cell valid); ``counter_bits`` gives each port's counter width (64 from ifXTable's HC
    column, 32 from ifTable's); ``speed_bps`` is the agent's speed (ifHighSpeed x 1e6, else ifSpeed;
    NaN where it said neither). ``high_speed_mbps`` is 0 and ``oper_up`` False where not served.
    """

    switch: str
    ts_ns: int
    sys_uptime_ticks: int | None
    ifindex: npt.NDArray[np.int32]
    counters: dict[str, npt.NDArray[np.uint64]]
    high_speed_mbps: npt.NDArray[np.uint32]
    oper_up: npt.NDArray[np.bool_]
    discontinuity_ticks: npt.NDArray[np.int64] | None
    varbinds: int
    duration_s: float
    dropped_rows: int = 0
    cell_ts_ns: dict[str, npt.NDArray[np.int64]] | None = None
    valid: dict[str, npt.NDArray[np.bool_]] | None = None
    counter_bits: dict[str, npt.NDArray[np.uint8]] | None = None
    speed_bps: npt.NDArray[np.float64] | None = None


@dataclass(frozen=True)
class _Session:
    """What one poll's requests share: the loop's engine context and the configured target."""

    ctx: LoopContext
    target: SnmpTarget
    name: str
    context_name: bytes


class _Walk:
    """Accumulates one multi-column walk: (index, int value) per column, plus bad-cell counts."""

    def __init__(self, columns: Sequence[Column]) -> None:
        self.columns = columns
        self.index: list[list[int]] = [[] for _ in columns]
        self.values: list[list[int]] = [[] for _ in columns]
        self.read_ns: list[list[int]] = [[] for _ in columns]
        self.bad_cells = 0
        self.varbinds = 0


Engine = Literal["fast", "pysnmp"]


class SnmpPoller:
    """Polls IF-MIB of many switches from one event loop.

    ``engine="fast"`` (default) polls v2c targets, and v3 ones whose protocols :mod:`~collectors.snmp.usm`
    speaks, with our own client (:mod:`collectors.snmp.v2c`, one UDP endpoint per loop); other v3
    targets, and every target with ``engine="pysnmp"``, go through that loop's pysnmp engine.
    Both give the same :class:`IfSnapshot` and the same errors.
    ``max_repetitions`` rows per column per GETBULK (the agent may return fewer).
    ``deadline_s`` bounds one whole poll (None: only per-request timeout x retries apply).
    ``fallback`` columns (32-bit counters, ifSpeed) are walked while a target needs them.
    """

    def __init__(
        self,
        columns: Sequence[Column] = COLUMNS,
        *,
        fallback: Sequence[Column] = FALLBACK_COLUMNS,
        max_repetitions: int = 25,
        deadline_s: float | None = None,
        engine: Engine = "fast",
    ) -> None:
        if engine not in ("fast", "pysnmp"):
            raise ValueError(f"engine must be 'fast' or 'pysnmp', got {engine!r}")
        self.columns = tuple(columns)
        self.fallback = tuple(fallback)
        # target name → keys of the fallback columns its last poll needed (absent: walk them all)
        self._fallback_needed: dict[str, frozenset[str]] = {}
        self.max_repetitions = max_repetitions
        self.deadline_s = deadline_s
        self.engine: Engine = engine
        self._generator = cmdgen.BulkCommandGeneratorSingleRun()

    async def poll_many(self, targets: Sequence[SnmpTarget]) -> list[IfSnapshot | SnmpPollError]:
        """Poll all targets concurrently; a failed target yields its error, never blocks others."""
        return list(await asyncio.gather(*(self._poll_or_error(t) for t in targets)))

    async def _poll_or_error(self, target: SnmpTarget) -> IfSnapshot | SnmpPollError:
        try:
            return await self.poll(target)
        except SnmpPollError as exc:
            return exc

    async def poll(self, target: SnmpTarget) -> IfSnapshot:
        """One snapshot of ``target``; raises only :class:`SnmpPollError`."""
        try:
            if self.deadline_s is None:
                return await self._poll(target)
            async with asyncio.timeout(self.deadline_s):  # not wait_for: it can lose a cancel on 3.11
                return await self._poll(target)
        except SnmpPollError as exc:
            if exc.kind == "malformed":
                PARSE_ERRORS["malformed_poll"] += 1
            raise
        except TimeoutError:
            raise SnmpPollError(
                "timeout", f"{target.name}: no complete poll within {self.deadline_s} s"
            ) from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # pysnmp or decoding surprises: contained, named, counted
            PARSE_ERRORS["malformed_poll"] += 1
            raise SnmpPollError("malformed", f"{target.name}: {type(exc).__name__}: {exc}") from exc

    async def _poll(self, target: SnmpTarget) -> IfSnapshot:
        s = target.settings
        if self.engine == "fast" and (s.version == "2c" or usm.fast_path_supports(s)):
            return await self._poll_fast(target)
        ctx = loop_context()
        try:
            name = await ctx.target_name(target.address, target.port, target.settings)
        except ValueError as exc:
            raise SnmpPollError("auth", f"{target.name}: {exc}") from exc
        context_name = target.settings.v3_context.encode()
        columns = self._plan(target.name)
        t0_ns, t0 = time.time_ns(), time.perf_counter()
        walk = _Walk(columns)
        uptime = await self._walk(_Session(ctx, target, name, context_name), walk)
        t1_ns, t1 = time.time_ns(), time.perf_counter()
        snap = self._assemble(
            target.name, walk.index, walk.values, varbinds=walk.varbinds, uptime=uptime,
            ts_ns=(t0_ns + t1_ns) // 2, duration_s=t1 - t0, read_ns=walk.read_ns, columns=columns,
        )  # fmt: skip
        PARSE_ERRORS["bad_cell"] += walk.bad_cells
        PARSE_ERRORS["dropped_row"] += snap.dropped_rows
        return snap

    async def _poll_fast(self, target: SnmpTarget) -> IfSnapshot:
        s = target.settings
        columns = self._plan(target.name)
        t0_ns, t0 = time.time_ns(), time.perf_counter()
        fast = await v2c.walk_columns(
            target.name, target.address, target.port, community=s.community,
            columns=[c.oid for c in columns], kinds=[c.kind for c in columns],
            uptime_oid=SYS_UPTIME, max_repetitions=self.max_repetitions, timeout_s=s.timeout_s,
            retries=s.retries, max_cells=MAX_ROWS, v3=s if s.version == "3" else None,
        )  # fmt: skip
        t1_ns, t1 = time.time_ns(), time.perf_counter()
        if fast.varbinds and not fast.uptime_ok:
            PARSE_ERRORS["bad_uptime"] += 1
        snap = self._assemble(
            target.name, fast.index, fast.values, varbinds=fast.varbinds, uptime=fast.uptime_ticks,
            ts_ns=(t0_ns + t1_ns) // 2, duration_s=t1 - t0, read_ns=fast.read_ns, columns=columns,
        )  # fmt: skip
        PARSE_ERRORS["bad_cell"] += fast.bad_cells
        PARSE_ERRORS["dropped_row"] += snap.dropped_rows
        return snap

    async def _request(self, session: _Session, non_rep: int, oids: list[tuple[int, ...]]) -> tuple[Any, int]:
        """(varbinds, read time in Unix-epoch ns) of one GETBULK through pysnmp."""
        ctx, target = session.ctx, session.target
        peer = (target.address, target.port)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def done(_e: Any, _h: Any, ei: Any, es: Any, ix: Any, vbs: Any, _c: Any) -> None:
            if not future.done():
                future.set_result((ei, es, ix, vbs))

        bad_before = ctx.bad_datagrams[peer]
        sent_ns = time.time_ns()
        self._generator.send_varbinds(
            ctx.engine, session.name, None, session.context_name, non_rep, self.max_repetitions,
            [(oid, _NULL) for oid in oids], done,
        )  # fmt: skip
        error_indication, error_status, error_index, varbinds = await future
        received_ns = ctx.last_rx_ns.get(peer, 0)
        if received_ns < sent_ns:  # (a name, not an IP: the stamp is under the IP) → callback time
            received_ns = time.time_ns()
        # pysnmp resends on its own: the answer belongs (most likely) to the last resend before it
        # arrived, about k timeouts after the first send.
        timeout_ns = round(target.settings.timeout_s * 1e9)
        resends = min(target.settings.retries, (received_ns - sent_ns) // timeout_ns) if timeout_ns > 0 else 0
        read_ns = (sent_ns + resends * timeout_ns + received_ns) // 2
        if error_indication:
            if isinstance(error_indication, errind.RequestTimedOut):
                if ctx.bad_datagrams[(target.address, target.port)] > bad_before:
                    raise SnmpPollError("malformed", f"{target.name}: unparseable response datagram(s)")
                raise SnmpPollError("timeout", f"{target.name}: {error_indication}")
            if isinstance(error_indication, _AUTH_ERRORS):
                raise SnmpPollError("auth", f"{target.name}: {error_indication}")
            raise SnmpPollError("agent_error", f"{target.name}: {error_indication}")
        if error_status:
            raise SnmpPollError(
                "agent_error", f"{target.name}: {error_status.prettyPrint()} at varbind {int(error_index)}"
            )
        return varbinds, read_ns

    async def _walk(self, session: _Session, walk: _Walk) -> int | None:
        target = session.target
        prefixes = [c.oid for c in walk.columns]
        cursor: list[tuple[int, ...]] = list(prefixes)
        kinds = [_KIND_TYPES[c.kind] for c in walk.columns]
        active = list(range(len(walk.columns)))
        uptime: int | None = None
        first = True
        while active:
            head = [SYS_UPTIME] if first else []
            varbinds, read_ns = await self._request(session, len(head), head + [cursor[i] for i in active])
            walk.varbinds += len(varbinds)
            if first:
                uptime = _uptime(*varbinds[0]) if varbinds else None
                varbinds = varbinds[1:]
                first = False
            if not varbinds:
                raise SnmpPollError("malformed", f"{target.name}: empty GETBULK response")
            n = len(active)
            moved, done = set(), set()
            for k, (oid_obj, value) in enumerate(varbinds):
                i = active[k % n]
                if i in done:
                    continue
                oid = oid_obj.asTuple()
                prefix = prefixes[i]
                if isinstance(value, _END) or oid[: len(prefix)] != prefix:
                    done.add(i)
                    continue
                if oid <= cursor[i]:
                    raise SnmpPollError(
                        "malformed", f"{target.name}: OID not increasing in {dotted(prefix)}: {dotted(oid)}"
                    )
                cursor[i] = oid
                moved.add(i)
                if len(oid) != len(prefix) + 1 or not isinstance(value, kinds[i]):
                    walk.bad_cells += 1
                    continue
                walk.index[i].append(oid[-1])
                walk.values[i].append(int(value))  # type: ignore[call-overload]
                walk.read_ns[i].append(read_ns)
            if not moved and not done:
                raise SnmpPollError("malformed", f"{target.name}: GETBULK response made no progress")
            active = [i for i in active if i not in done]
            if sum(map(len, walk.index)) > MAX_ROWS:
                raise SnmpPollError("malformed", f"{target.name}: table longer than {MAX_ROWS} cells")
        return uptime

    def _plan(self, target: str) -> tuple[Column, ...]:
        """The columns of this target's next walk: every primary column, and the fallbacks its
        last poll needed (all of them before the first poll)."""
        needed = self._fallback_needed.get(target)
        if needed is None:
            return (*self.columns, *self.fallback)
        return (*self.columns, *(c for c in self.fallback if c.key in needed))

    def _assemble(
        self, switch: str, index: Sequence[npt.ArrayLike], values: Sequence[npt.ArrayLike], *,
        varbinds: int, uptime: int | None, ts_ns: int, duration_s: float, read_ns: Sequence[npt.ArrayLike],
        columns: Sequence[Column] | None = None,
    ) -> IfSnapshot:  # fmt: skip
        columns = self.columns if columns is None else tuple(columns)
        cols = {c.key: (np.asarray(index[j], dtype=np.int64), values[j]) for j, c in enumerate(columns)}
        col_read_ns = {c.key: read_ns[j] for j, c in enumerate(columns)}
        # A port is every ifIndex any column served (what identifies a port is its index): a hole
        # in one column is a gap in that metric of that port, never a lost port.
        base = np.unique(np.concatenate([idx for idx, _ in cols.values()] or [np.zeros(0, np.int64)]))
        in_range = (base > 0) & (base <= np.iinfo(np.int32).max)
        dropped = int(len(base) - in_range.sum())
        base = base[in_range]
        if not len(base):
            raise SnmpPollError("malformed", f"{switch}: the agent serves no IF-MIB interface rows")
        n = len(base)
        no = np.zeros(n, dtype=bool)
        zeros_u64, zeros_i64 = np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.int64)
        aligned: dict[str, npt.NDArray[np.uint64]] = {}
        present: dict[str, npt.NDArray[np.bool_]] = {}
        stamps: dict[str, npt.NDArray[np.int64]] = {}
        for key, (idx, cells) in cols.items():
            arr, here = align_ports(idx, np.asarray(cells, dtype=np.uint64), base)
            aligned[key], present[key] = arr.astype(np.uint64, copy=False), here
            if key in _COUNTER_KEYS or key in FALLBACK_FOR:
                ts_arr, _ = align_ports(idx, np.asarray(col_read_ns[key], dtype=np.int64), base)
                stamps[key] = ts_arr.astype(np.int64, copy=False)
        counters: dict[str, npt.NDArray[np.uint64]] = {}
        valid: dict[str, npt.NDArray[np.bool_]] = {}
        bits: dict[str, npt.NDArray[np.uint8]] = {}
        cell_ts: dict[str, npt.NDArray[np.int64]] = {}
        for key in COUNTER_KEYS:
            narrow = _NARROW_OF.get(key, "")
            wide_here = present.get(key, no)
            narrow_here = present.get(narrow, no) & ~wide_here
            ok = wide_here | narrow_here
            if not ok.any():
                continue  # the agent serves no cell of it: absent (every port NaN downstream)
            value = np.where(wide_here, aligned.get(key, zeros_u64), aligned.get(narrow, zeros_u64))
            counters[key] = np.where(ok, value, zeros_u64).astype(np.uint64)
            ts = np.where(wide_here, stamps.get(key, zeros_i64), stamps.get(narrow, zeros_i64))
            cell_ts[key] = ts.astype(np.int64)
            valid[key] = ok
            bits[key] = np.where(narrow_here, 32, COUNTER_WIDTH_BITS[key]).astype(np.uint8)
        hs_here = present.get("high_speed_mbps", no)
        hs = np.where(hs_here, aligned.get("high_speed_mbps", zeros_u64), 0).astype(np.float64)
        sp_here = present.get("speed_bps32", no)
        sp = aligned.get("speed_bps32", zeros_u64).astype(np.float64)
        # ifHighSpeed (Mb/s) when it says a speed; else ifSpeed below its saturation; else unknown.
        speed = np.where(hs_here & (hs > 0), hs * 1e6,
                         np.where(sp_here & (sp > 0) & (sp < IF_SPEED_MAX), sp, np.nan))  # fmt: skip
        self._fallback_needed[switch] = frozenset(
            f for f, primary in FALLBACK_FOR.items()
            if not bool(present.get(primary, no).all())
            or (primary == "high_speed_mbps" and bool((hs <= 0).any()))
        )  # fmt: skip
        disc = None
        if present.get("discontinuity_ticks", no).any():
            disc = aligned["discontinuity_ticks"].astype(np.int64)
        oper = aligned.get("oper_status", zeros_u64)
        return IfSnapshot(
            switch=switch,
            ts_ns=ts_ns,
            sys_uptime_ticks=uptime,
            ifindex=base.astype(np.int32),
            counters=counters,
            high_speed_mbps=hs.astype(np.uint32),
            oper_up=(oper == 1) & present.get("oper_status", no),
            discontinuity_ticks=disc,
            varbinds=varbinds,
            duration_s=duration_s,
            dropped_rows=dropped,
            cell_ts_ns=cell_ts,
            valid=valid,
            counter_bits=bits,
            speed_bps=speed,
        )

    async def names(self, target: SnmpTarget) -> dict[int, str]:
        """ifName per ifIndex, else ifDescr (``{}`` if the agent serves neither). It runs when a
        collector starts, after a restart or a changed ifIndex set and every few minutes, not per
        poll: v2c through our own client (general decoder; building a pysnmp engine for it would
        stall the loop for about a second at a lease start), v3 through the loop's pysnmp engine.
        Raises only :class:`SnmpPollError`."""
        try:
            fast = self.engine == "fast" and target.settings.version == "2c"
            walk = self._names_fast if fast else self._names
            # ifName, else ifDescr (an agent without ifXTable): how discovery names interfaces too.
            return await walk(target, IF_NAME) or await walk(target, IF_DESCR)
        except (SnmpPollError, asyncio.CancelledError):
            raise
        except Exception as exc:  # pysnmp surprises: contained and named, as in poll()
            what = f"{type(exc).__name__}: {exc}"
            raise SnmpPollError("malformed", f"{target.name}: ifName walk: {what}") from exc

    async def _names(self, target: SnmpTarget, column: tuple[int, ...]) -> dict[int, str]:
        ctx = loop_context()
        try:
            name = await ctx.target_name(target.address, target.port, target.settings)
        except ValueError as exc:
            raise SnmpPollError("auth", f"{target.name}: {exc}") from exc
        session = _Session(ctx, target, name, target.settings.v3_context.encode())
        out: dict[int, str] = {}
        cursor = column
        while len(out) < MAX_ROWS:
            varbinds, _ = await self._request(session, 0, [cursor])
            if not varbinds:
                return out
            for oid_obj, value in varbinds:
                oid = oid_obj.asTuple()
                if isinstance(value, _END) or oid[: len(column)] != column:
                    return out
                if oid <= cursor:
                    raise SnmpPollError("malformed", f"{target.name}: ifName not increasing: {dotted(oid)}")
                cursor = oid
                if len(oid) == len(column) + 1 and isinstance(value, rfc1902.OctetString):
                    out[oid[-1]] = bytes(value).decode("utf-8", "replace")
        raise SnmpPollError("malformed", f"{target.name}: ifName column longer than {MAX_ROWS} rows")


    async def _names_fast(self, target: SnmpTarget, column: tuple[int, ...]) -> dict[int, str]:
        s = target.settings
        family, addr = await v2c.resolve(target.address, target.port)
        client = await v2c.client_for(family)
        comm = s.community.encode()
        prefix = ber.encode_oid(column)
        cursor = prefix
        out: dict[int, str] = {}
        while len(out) < MAX_ROWS:
            rid = client.next_request_id()
            payload = ber.encode_request(1, comm, ber.GETBULK, request_id=rid, oids=[cursor],
                                         max_repetitions=self.max_repetitions)  # fmt: skip
            data, h, _t = await client.request(
                addr, payload, rid, version=1, community=comm, name=target.name, timeout_s=s.timeout_s,
                retries=s.retries,
            )
            if h.error_status:
                raise SnmpPollError("agent_error", f"{target.name}: error-status {h.error_status} (ifName)")
            varbinds = ber.iter_varbinds(data, h.vb_start, h.vb_end)
            if not varbinds:
                return out
            for oid, tag, value in varbinds:
                if tag in ber.EXCEPTIONS or not oid.startswith(prefix):
                    return out
                here = ber.decode_oid(oid)
                if here <= ber.decode_oid(cursor):
                    raise SnmpPollError("malformed", f"{target.name}: ifName not increasing")
                cursor = oid
                tail = here[len(column) :]
                if len(tail) == 1 and tag == ber.OCTET_STRING and isinstance(value, bytes):
                    out[tail[0]] = value.decode("utf-8", "replace")
        raise SnmpPollError("malformed", f"{target.name}: ifName column longer than {MAX_ROWS} rows")


_NARROW_OF = {primary: narrow for narrow, primary in FALLBACK_FOR.items()}
_COUNTER_KEYS = frozenset(COUNTER_KEYS)


def _uptime(oid: Any, value: Any) -> int | None:
    """sysUpTime.0 from the first response, or None if the agent answered something else."""
    if oid.asTuple() != (*SYS_UPTIME, 0) or type(value) is not rfc1902.TimeTicks:
        PARSE_ERRORS["bad_uptime"] += 1
        return None
    return int(value)
