"""The running twin: job → routing → counters clock → one SNMP agent per switch, plus faults and truth.

Usage from tests::

    with Twin(TwinConfig(servers=4, gpus_per_server=4, spines=2)) as tw:
        sw = tw.fabric.switches[0]            # sw.snmp.port is the real UDP port
        ... poll 127.0.0.1:sw.snmp.port ...
        tw.true_rates(sw.name, t1_ns, t2_ns)  # what a poller should have measured over [t1, t2]

With ``TwinConfig(gnmi=True)`` every switch also serves gNMI (``tw.gnmi_ports[name]``, and
``sw.gnmi.port`` in ``tw.fabric``): interface counters from the same clock, plus the egress queue
model of twin/fabric_queues.py (ECN, PFC, watermark, drops); truth via ``true_queue`` and
``true_watermark``.

With ``TwinConfig(report_url=…, report_token=… | report_token_file=…)`` the MoE job reports
itself to fabricmon's jobs API as a real job would with the probe: a run (tags twin, moe,
routing=…, ep=N), its rank map, and each completed phase's per-peer bytes as events
(twin/live_reporter.py; counts under ``report`` in ``status()``, run ended on ``stop()``).

Everything runs on one background thread with its own asyncio loop (ticker + agents), so counter
updates and agent reads never interleave mid-PDU; other threads read through the clock's lock.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.core.topology.spec import FabricSpec, GnmiSettings, SnmpSettings
from twin.agent_state import TICKS_PER_S, SwitchAgentState
from twin.counters import HC_METRICS, METRICS, RATE_NAMES, CounterClock
from twin.fabric_queues import FabricQueues, peer_positions
from twin.gnmi_target import GnmiFabric
from twin.mib import build_switch_mib
from twin.moe import MoeConfig, MoeTraffic
from twin.queues import TwinSwitchSource, queue_leaves
from twin.routing import Router, RoutingMode, Wiring
from twin.schedule import JobTimeline
from twin.snmp_v2c import V2cAgentProtocol
from twin.snmp_v3 import V3User, start_v3_agents

log = logging.getLogger(__name__)
NS = 1_000_000_000


@dataclass(frozen=True)
class TwinConfig:
    """Shape of the simulated cluster, its job, and how its agents are served."""

    name: str = "twin"
    servers: int = 32
    gpus_per_server: int = 8
    spines: int = 4
    speed_gbps: int = 400
    routing: RoutingMode = "pxn"
    snmp_version: Literal["2c", "3"] = "2c"
    snmp_port_base: int = 0  # 0 = ephemeral ports (reported in .fabric)
    community: str = field(default="public", repr=False)
    v3_user: V3User = field(default_factory=V3User)
    seed: int = 0
    tick_hz: float = 10.0
    history_s: float = 60.0
    lossy: bool = False
    buffer_bytes: float = 16e6
    packet_bytes: int = 4096
    job: MoeConfig = field(default_factory=MoeConfig)
    gnmi: bool = False  # also serve gNMI (queues, ECN, PFC, watermark) per switch; see .gnmi_ports
    gnmi_port_base: int = 0  # 0 = ephemeral ports
    # Live job reporting (twin/live_reporter.py): post the job's phase events to the jobs API at
    # report_url like a real job with the probe. None = off.
    report_url: str | None = None
    report_token: str | None = field(default=None, repr=False)
    report_token_file: str | None = None  # or read the token here (retried: it may appear later)
    run_name: str = "twin-moe"
    report_skew_ns: int = 0  # shift event times: a wrong host clock (gate tests)
    report_every_steps: int = 1  # report every k-th training step (load on a small demo server)
    report_block_steps: int = 1  # … in blocks of this many consecutive steps
    report_connect_timeout_s: float = 120.0  # retry run creation this long (server starting later)

    def __post_init__(self) -> None:
        if self.tick_hz < 10.0:
            raise ValueError(f"tick_hz must be ≥ 10 (counters move every ≤ 100 ms), got {self.tick_hz}")
        if self.report_url and not (self.report_token or self.report_token_file):
            raise ValueError("report_url needs report_token or report_token_file (a jobs API token)")
        if self.snmp_version not in ("2c", "3"):
            raise ValueError(f"snmp_version must be '2c' or '3', got {self.snmp_version!r}")


@dataclass(frozen=True)
class HotPort:
    """The port with the highest egress utilization over an interval, and what it faces."""

    switch: str
    ifindex: int
    peer: str
    utilization: float
    out_octets_per_s: float


class Twin:
    """A simulated rail-optimized cluster running an MoE job, served over SNMP on loopback."""

    def __init__(self, cfg: TwinConfig | None = None, fabric: FabricSpec | None = None) -> None:
        self.cfg = cfg = cfg or TwinConfig()
        snmp = SnmpSettings(
            version=cfg.snmp_version,
            community=cfg.community,
            v3_user=cfg.v3_user.name if cfg.snmp_version == "3" else "",
            v3_auth_protocol=cfg.v3_user.auth_protocol,
            v3_auth_key=cfg.v3_user.auth_key if cfg.snmp_version == "3" else "",
            v3_priv_protocol=cfg.v3_user.priv_protocol,
            v3_priv_key=cfg.v3_user.priv_key if cfg.snmp_version == "3" else "",
        )
        self.fabric = fabric or rail_optimized(
            cfg.name,
            servers=cfg.servers,
            gpus_per_server=cfg.gpus_per_server,
            spines=cfg.spines,
            speed_gbps=cfg.speed_gbps,
            snmp=snmp,
            snmp_base_port=cfg.snmp_port_base or 16100,
        )
        self.ports = build_port_index(self.fabric)
        self.wiring = Wiring(self.fabric, self.ports)
        self.router = Router(self.wiring, cfg.routing, seed=cfg.seed)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._start_error: BaseException | None = None
        self.agents: dict[str, SwitchAgentState] = {}
        self._protocols: dict[str, V2cAgentProtocol] = {}
        self._engines: list[Any] = []
        self.t0_ns = 0
        self.ticks = 0
        self.queues: FabricQueues | None = None  # with cfg.gnmi: the egress queue model
        self.gnmi: GnmiFabric | None = None
        self.gnmi_ports: dict[str, int] = {}  # switch → gNMI port on 127.0.0.1 (cfg.gnmi)
        self.reporter: Any = None  # twin.live_reporter.LiveJobReporter with cfg.report_url

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> Twin:
        cfg = self.cfg
        self.t0_ns = time.time_ns()
        rng = np.random.default_rng(cfg.seed)
        initial = np.zeros((len(self.ports), len(METRICS)), dtype=np.uint64)
        # Counters do not start at 0 on a real switch; a collector must not assume they do.
        octets = rng.integers(0, 1 << 40, size=(len(self.ports), 2), dtype=np.uint64)
        initial[:, 0:2] = octets
        initial[:, 2:4] = octets // np.uint64(cfg.packet_bytes)
        capacity = math.ceil(cfg.history_s * cfg.tick_hz * 1.2) + 8
        self.clock = CounterClock(len(self.ports), self.t0_ns, initial, capacity)
        self.timeline = JobTimeline(
            MoeTraffic(cfg.job, self.wiring.n_gpus, seed=cfg.seed),
            self.router,
            self.ports.speed_bps,
            self.ports.host_facing,
            self.t0_ns,
            lossy=cfg.lossy,
            buffer_bytes=cfg.buffer_bytes,
        )
        if cfg.report_url:
            self._start_reporter()
        if cfg.gnmi:
            self.queues = FabricQueues(
                self.timeline, self.ports, peer_positions(self.wiring.link, len(self.ports)), self.t0_ns,
                lossy=cfg.lossy, buffer_bytes=cfg.buffer_bytes, pkt_bytes=float(cfg.packet_bytes),
            )
        sockets = self._bind_sockets()
        switches = []
        for sw in self.fabric.switches:
            port = sockets[sw.name].getsockname()[1]
            switches.append(replace(sw, snmp=replace(sw.snmp, port=port)))
        self.fabric = replace(self.fabric, switches=tuple(switches))
        for sw in self.fabric.switches:
            sl = self.ports.slice_of(sw.name)
            local = [self._port_spec(sw.name, int(i)) for i in self.ports.ifindex[sl]]
            self.agents[sw.name] = SwitchAgentState(
                name=sw.name,
                entries=build_switch_mib(sw.name, local, self.wiring.peer[sl], len(METRICS),
                                         f"fabricmon twin {sw.role} {sw.name}"),
                read_counters=lambda t, sl=sl: self.clock.values_at(t, sl),
                boot_ns=self.t0_ns,
                discontinuity_ticks=[0] * len(local),
            )
        self._thread = threading.Thread(target=self._run, args=(sockets,), name=f"twin-{cfg.name}",
                                        daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._start_error is not None:
            raise RuntimeError(f"twin failed to start: {self._start_error}") from self._start_error
        if cfg.gnmi:
            try:
                self._start_gnmi()
            except BaseException:
                self.stop()
                raise
        return self

    def _start_reporter(self) -> None:
        # imported here: twin.job_reporter (which the reporter uses) imports this module
        from twin.live_reporter import LiveJobReporter  # noqa: PLC0415

        cfg = self.cfg
        tags = ["twin", "moe", f"routing={cfg.routing}", f"ep={self.wiring.n_gpus}",
                f"fabric={self.fabric.name}"]
        assert cfg.report_url  # the caller checked
        self.reporter = LiveJobReporter(self.fabric, cfg.report_url, cfg.report_token or "",
                                        token_file=cfg.report_token_file, run_name=cfg.run_name,
                                        tags=tags, skew_ns=cfg.report_skew_ns,
                                        every_steps=cfg.report_every_steps,
                                        block_steps=cfg.report_block_steps,
                                        connect_timeout_s=cfg.report_connect_timeout_s)
        self.timeline.on_phase = self.reporter.on_phase
        self.reporter.start()

    def _start_gnmi(self) -> None:
        assert self.queues is not None
        sources = {}
        for sw in self.fabric.switches:
            sl = self.ports.slice_of(sw.name)
            sources[sw.name] = TwinSwitchSource(
                self.ports.port_names[sl], self.ports.speed_bps[sl], sl,
                read_counters=self.clock.values_at, queues=self.queues, t0_ns=self.t0_ns,
            )
        base = self.cfg.gnmi_port_base
        ports = {sw.name: base + k for k, sw in enumerate(self.fabric.switches)} if base else None
        self.gnmi = GnmiFabric(sources, ports=ports).start()
        self.gnmi_ports = dict(self.gnmi.ports)
        # the fabric names its targets (topology YAML, collectors), like the SNMP ports above
        self.fabric = replace(self.fabric, switches=tuple(
            replace(sw, gnmi=GnmiSettings(port=self.gnmi_ports[sw.name])) for sw in self.fabric.switches
        ))

    def _port_spec(self, switch: str, ifindex: int) -> Any:
        return next(p for p in self.fabric.switch(switch).ports if p.ifindex == ifindex)

    def _bind_sockets(self) -> dict[str, socket.socket]:
        out: dict[str, socket.socket] = {}
        try:
            for k, sw in enumerate(self.fabric.switches):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                out[sw.name] = s
                s.bind(("127.0.0.1", self.cfg.snmp_port_base + k if self.cfg.snmp_port_base else 0))
        except OSError:
            for s in out.values():
                s.close()
            raise
        return out

    def stop(self) -> None:
        if self.gnmi is not None:
            self.gnmi.stop()
            self.gnmi = None
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(10)
        self._thread = None
        if self.reporter is not None:  # after the ticker: no phase is placed any more; ends the run
            self.reporter.stop()

    def __enter__(self) -> Twin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, sockets: dict[str, socket.socket]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main(sockets))
        except BaseException as exc:  # reported to start() or logged: the thread must not die silently
            self._start_error = exc
            self._ready.set()
            log.exception("twin loop crashed")
        finally:
            loop.close()

    async def _main(self, sockets: dict[str, socket.socket]) -> None:
        loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        transports = []
        if self.cfg.snmp_version == "3":
            pairs = [(self.agents[name], sock) for name, sock in sockets.items()]
            self._engines.append(start_v3_agents(pairs, self.cfg.community, self.cfg.v3_user))
        for name, sock in sockets.items():
            state = self.agents[name]
            if self.cfg.snmp_version == "2c":
                proto = V2cAgentProtocol(state, self.cfg.community)
                tr, _ = await loop.create_datagram_endpoint(lambda p=proto: p, sock=sock)
                transports.append(tr)
                self._protocols[name] = proto
        ticker = asyncio.create_task(self._ticker())
        await asyncio.sleep(0.05)  # let pysnmp finish opening its endpoints
        self._ready.set()
        await self._stopping.wait()
        ticker.cancel()
        for tr in transports:
            tr.close()
        for e in self._engines:
            e.close_dispatcher()
        for s in sockets.values():
            s.close()

    async def _ticker(self) -> None:
        period_ns = int(NS / self.cfg.tick_hz)
        nxt = self.t0_ns
        while True:
            self._tick(time.time_ns(), period_ns)
            nxt += period_ns
            await asyncio.sleep(max(0.0, (nxt - time.time_ns()) / NS))

    def _rates(self, a_ns: int, b_ns: int) -> np.ndarray:
        in_b, out_b, drop_b = self.timeline.window_bytes(a_ns, b_ns)
        dt = (b_ns - a_ns) / NS
        pkt = float(self.cfg.packet_bytes)
        rates = np.zeros((len(self.ports), len(METRICS)))
        rates[:, 0], rates[:, 1] = in_b / dt, out_b / dt
        rates[:, 2], rates[:, 3] = in_b / pkt / dt, out_b / pkt / dt
        rates[:, 5] = drop_b / pkt / dt
        return rates

    def _tick(self, now_ns: int, period_ns: int, overrides: list[tuple[Any, Any]] | None = None) -> None:
        self.clock.advance(now_ns, self._rates(now_ns, now_ns + period_ns), overrides=overrides)
        if self.queues is not None:  # keep the queues current: the timeline forgets old phases
            self.queues.advance_to(now_ns)
        self.ticks += 1

    # -- faults (thread-safe; applied on the twin's loop) ------------------------------------------
    def _on_loop(self, fn: Any) -> None:
        if self._loop is None:
            raise RuntimeError("twin is not running")
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()

        self._loop.call_soon_threadsafe(run)
        if not done.wait(10):
            raise RuntimeError("twin loop did not apply the fault within 10 s")

    def restart(self, switch: str) -> None:
        """Agent restart: sysUpTime and all the switch's counters start again from 0."""
        state, sl = self.agents[switch], self.ports.slice_of(switch)

        def apply() -> None:
            now = time.time_ns()
            self._tick(now, int(NS / self.cfg.tick_hz), overrides=[((sl, slice(None)), 0)])
            state.boot_ns = now
            state.discontinuity_ticks = [0] * len(state.discontinuity_ticks)

        self._on_loop(apply)

    def set_unreachable(self, switch: str, on: bool = True) -> None:
        """The switch's agent stops answering (``on``) or answers again."""
        self.agents[switch].unreachable = on

    def wrap(self, switch: str, seconds_to_wrap: float = 2.0) -> None:
        """Move the switch's 64-bit counters to just below 2^64 so they wrap in ``seconds_to_wrap``
        (ports that will carry no traffic by then sit at 2^64 − 1).

        The jump itself is a discontinuity (ifCounterDiscontinuityTime is set to now); the wrap that
        follows is a natural one.
        """
        state, sl = self.agents[switch], self.ports.slice_of(switch)

        def apply() -> None:
            now = time.time_ns()
            # The job's schedule is known ahead: leave exactly the bytes (and packets) the port
            # will count in the next ``seconds_to_wrap``, so the wrap lands on time.
            in_b, out_b, _ = self.timeline.window_bytes(now, now + int(seconds_to_wrap * NS))
            pkt = self.cfg.packet_bytes
            ahead = np.stack([in_b, out_b, in_b / pkt, out_b / pkt], axis=1)
            headroom = np.ceil(np.maximum(ahead[sl], 1.0)).astype(np.uint64)
            with np.errstate(over="ignore"):
                near = np.uint64(0) - headroom  # 2^64 − headroom, in wrapping uint64
            self._tick(now, int(NS / self.cfg.tick_hz), overrides=[((sl, HC_METRICS), near)])
            ticks = ((now - state.boot_ns) * TICKS_PER_S // NS) & 0xFFFFFFFF
            state.discontinuity_ticks = [int(ticks)] * len(state.discontinuity_ticks)

        self._on_loop(apply)

    # -- truth ------------------------------------------------------------------------------------
    def _slice(self, switch: str | None) -> slice:
        return self.ports.slice_of(switch) if switch is not None else slice(0, len(self.ports))

    def switch_ports(self, switch: str) -> list[dict[str, Any]]:
        """The switch's ports in PortIndex order (the order of every per-switch array here)."""
        sl = self.ports.slice_of(switch)
        return [
            {"position": p, "ifindex": int(self.ports.ifindex[p]), "name": self.ports.port_names[p],
             "peer": self.wiring.peer[p], "host_facing": bool(self.ports.host_facing[p])}
            for p in range(sl.start, sl.stop)
        ]

    def true_rates(self, switch: str | None, t1_ns: int, t2_ns: int) -> dict[str, np.ndarray]:
        """Per-port average rates over exactly [t1, t2] (bytes/s, pkts/s, discards/s)."""
        r = self.clock.mean_rates(t1_ns, t2_ns, self._slice(switch))
        return {name: r[:, k] for k, name in enumerate(RATE_NAMES)}

    def counters_at(self, switch: str | None, t_ns: int) -> dict[str, np.ndarray]:
        """Counter values (uint64) per port at ``t_ns``, as the agent would have answered then."""
        v = self.clock.values_at(t_ns, self._slice(switch))
        return {name: v[:, k] for k, name in enumerate(METRICS)}

    def hottest_port(self, t1_ns: int, t2_ns: int) -> HotPort:
        out = self.clock.mean_rates(t1_ns, t2_ns)[:, 1]
        util = out * 8.0 / self.ports.speed_bps
        p = int(np.argmax(util))
        return HotPort(
            switch=self.ports.switch_names[int(self.ports.switch_of[p])],
            ifindex=int(self.ports.ifindex[p]),
            peer=self.wiring.peer[p],
            utilization=float(util[p]),
            out_octets_per_s=float(out[p]),
        )

    def true_queue(self, switch: str | None, t_ns: int) -> dict[str, np.ndarray]:
        """Queue, ECN, PFC counters (uint64 per port) the gNMI target serves at ``t_ns``
        (twin.queues.queue_leaves names), plus ``q_bytes``, the occupancy. Needs ``gnmi=True``."""
        if self.queues is None:
            raise RuntimeError("the queue model runs only with TwinConfig(gnmi=True)")
        cum = self.queues.counters_at(t_ns)
        sl = self._slice(switch)
        pkt = self.queues.cfg.pkt_bytes
        out: dict[str, np.ndarray] = queue_leaves({k: a[sl] for k, a in cum.items()}, pkt)
        out["q_bytes"] = cum["q_bytes"][sl]
        return out

    def true_watermark(self, switch: str | None, t1_ns: int, t2_ns: int) -> np.ndarray:
        """Max egress queue occupancy per port over [t1, t2], whole bytes (what a read-and-clear
        watermark read at t2 reports when the previous clear was at t1). Needs ``gnmi=True``."""
        if self.queues is None:
            raise RuntimeError("the queue model runs only with TwinConfig(gnmi=True)")
        return np.floor(self.queues.peak_bytes(t1_ns, t2_ns)[self._slice(switch)]).astype(np.uint64)

    def phases(self, t1_ns: int, t2_ns: int) -> list[dict[str, object]]:
        """Phase events (step, layer, dispatch|combine, start/end ns, hot GPU) overlapping [t1, t2]."""
        return self.timeline.events(t1_ns, t2_ns)

    def status(self) -> dict[str, Any]:
        return {
            "fabric": self.fabric.name,
            "description": self.fabric.description,
            "snmp_version": self.cfg.snmp_version,
            "routing": self.cfg.routing,
            "t0_ns": self.t0_ns,
            "now_ns": time.time_ns(),
            "ticks": self.ticks,
            "ports": len(self.ports),
            "switches": {
                sw.name: {
                    "address": sw.mgmt_address,
                    "port": sw.snmp.port,
                    "unreachable": self.agents[sw.name].unreachable if self.agents else False,
                    "boot_ns": self.agents[sw.name].boot_ns if self.agents else None,
                    "answered": self._protocols[sw.name].answered if sw.name in self._protocols else None,
                    "malformed": self._protocols[sw.name].malformed if sw.name in self._protocols else None,
                    "gnmi_port": self.gnmi_ports.get(sw.name),
                }
                for sw in self.fabric.switches
            },
            "report": self.reporter.status() if self.reporter is not None else None,
        }
