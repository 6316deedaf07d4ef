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
(twin/live_reporter.py, run in its own process by twin/reporter_process.py so the agents never
wait on it; counts under ``report`` in ``status()``, run ended on ``stop()``).

The agents run on one background thread with its own asyncio loop; the ticker (the job's
simulation: timeline, queues, counter clock) on a thread of its own, so an agent never waits for a
tick (a 16,896-port tick is tens of ms; on the agents' loop it timed SNMP polls out). An agent
reads the clock once per request under its lock, so a PDU stays coherent; ticks (the ticker's and
a fault's) take one lock.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import threading
import time
from dataclasses import replace
from typing import Any

import numpy as np

from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.core.topology.spec import FabricSpec, GnmiSettings, SnmpSettings
from twin.agent_state import SwitchAgentState
from twin.config import TwinConfig
from twin.counters import METRICS, CounterClock
from twin.fabric_queues import FabricQueues, peer_positions
from twin.faults import TwinFaults
from twin.gnmi_sources import TwinSwitchSource
from twin.gnmi_target import GnmiFabric
from twin.lldp import TwinLldp
from twin.mib import build_switch_mib
from twin.moe import MoeTraffic
from twin.reporter_process import ReporterProcess
from twin.routing import Router, Wiring
from twin.schedule import JobTimeline
from twin.snmp_v2c import V2cAgentProtocol
from twin.snmp_v3 import start_v3_agents
from twin.truth import TwinTruth

log = logging.getLogger(__name__)
NS = 1_000_000_000
COUNTER_HISTORY_BYTES = 128 << 20
MAX_JOB_LAG_NS = 2 * NS


class Twin(TwinFaults, TwinTruth, TwinLldp):
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
        self._init_lldp()
        self.wiring = Wiring(self.fabric, self.ports)
        self.ep_gpus = cfg.job.group_gpus(self.wiring.n_gpus)  # GPUs per EP group (twin/moe.py)
        self.router = Router(self.wiring, cfg.routing, seed=cfg.seed, group_gpus=self.ep_gpus)
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
        self._tick_lock = threading.Lock()
        self._last_tick_ns = 0
        self._grid_k = 0  # the newest counter tick laid on the grid t0 + k·period (_tick)
        self.late_ticks = 0  # grid ticks laid after their time by a late ticker (status)
        self._ticker_stop = threading.Event()
        self._ticker_thread: threading.Thread | None = None
        self.queues: FabricQueues | None = None  # with cfg.gnmi: the egress queue model
        self.gnmi: GnmiFabric | None = None
        self.gnmi_ports: dict[str, int] = {}  # switch → gNMI port on 127.0.0.1 (cfg.gnmi)
        self.reporter: Any = None  # twin.reporter_process.ReporterProcess with cfg.report_url

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
        # the counters' truth history: history_s, or what COUNTER_HISTORY_BYTES holds (16,896
        # ports are 1.4 MB a tick: 60 s at 10 Hz would be 1 GB — ~9 s is kept there)
        per_tick = len(self.ports) * len(METRICS) * 12  # uint64 value + float32 rate
        capacity = min(math.ceil(cfg.history_s * cfg.tick_hz * 1.2) + 8,
                       max(32, COUNTER_HISTORY_BYTES // max(1, per_tick)))
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
        self.timeline.max_lag_ns = MAX_JOB_LAG_NS  # past this behind, the job stalls (see /status)
        self.tick_ns = int(NS / cfg.tick_hz)  # the counters' grid: t0 + k·tick_ns
        first_end = self.t0_ns + self.tick_ns  # the tick at t0: the job's first span counted too
        self.clock.advance(self.t0_ns, self._rates(self.t0_ns, first_end), until_ns=first_end)
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
                entries=sorted([*build_switch_mib(sw.name, local, self.wiring.peer[sl], len(METRICS),
                                                  f"fabricmon twin {sw.role} {sw.name}"),
                                *self.lldp_mib(sw.name)], key=lambda e: e.oid),
                read_counters=lambda t, sl=sl: self._counters_at(t, sl),
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
        cfg = self.cfg
        tags = ["twin", "moe", f"routing={cfg.routing}", f"ep={self.ep_gpus}",
                f"fabric={self.fabric.name}"]
        assert cfg.report_url  # the caller checked
        self.reporter = ReporterProcess(self.fabric, cfg.report_url, cfg.report_token or "",
                                        token_file=cfg.report_token_file, run_name=cfg.run_name,
                                        tags=tags, skew_ns=cfg.report_skew_ns,
                                        every_steps=cfg.report_every_steps,
                                        block_steps=cfg.report_block_steps,
                                        connect_timeout_s=cfg.report_connect_timeout_s,
                                        group_gpus=self.ep_gpus)
        self.timeline.on_phase = self.reporter.on_phase
        self.timeline.wants_blocks = self.reporter.wants
        self.reporter.start()

    def _start_gnmi(self) -> None:
        assert self.queues is not None
        sources = {}
        for sw in self.fabric.switches:
            sl = self.ports.slice_of(sw.name)
            sources[sw.name] = TwinSwitchSource(
                self.ports.port_names[sl], self.ports.speed_bps[sl], sl,
                read_counters=self._counters_at, queues=self.queues, t0_ns=self.t0_ns,
            )
        base = self.cfg.gnmi_port_base
        ports = {sw.name: base + k for k, sw in enumerate(self.fabric.switches)} if base else None
        self.gnmi = GnmiFabric(sources, ports=ports)
        for name, servicer in self.gnmi.servicers.items():
            servicer.lldp = lambda name=name: self.lldp_neighbours(name)
        self.gnmi.start()
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
        self._ticker_thread = threading.Thread(target=self._ticker, name=f"twin-{self.cfg.name}-ticker",
                                               daemon=True)
        self._ticker_thread.start()
        await asyncio.sleep(0.05)  # let pysnmp finish opening its endpoints
        self._ready.set()
        await self._stopping.wait()
        self._ticker_stop.set()
        await asyncio.to_thread(self._ticker_thread.join, 10)
        for tr in transports:
            tr.close()
        for e in self._engines:
            e.close_dispatcher()
        for s in sockets.values():
            s.close()

    def _ticker(self) -> None:
        nxt = self.t0_ns
        while not self._ticker_stop.is_set():
            try:
                self._tick(time.time_ns())
            except Exception:  # a tick that failed must not end the counters; say so, go on
                log.exception("twin tick failed")
            nxt += self.tick_ns
            now = time.time_ns()
            nxt = max(nxt, now)  # behind (a starved CPU): the next tick now, never a burst of them
            self._ticker_stop.wait((nxt - now) / NS)

    def _lay_grid(self, now_ns: int) -> int:
        """Lay the counter ticks on the grid t0 + k·tick_ns up to ``now_ns``, each with the
        schedule's rates over its own span; the newest grid index. Under ``_tick_lock``.

        A late ticker (at 16,896 ports on a busy box it stalls past a second) lays the ticks it
        missed: a segment's rates hold only over the span they were computed for (the counter is
        held after it, twin/counters.py), so the traffic of a stalled second is counted, not
        replaced by the rates of the second before. Without it, a step's whole all-to-all could
        fall in a stall and never reach the counters. Past MAX_JOB_LAG_NS behind, the job stalls
        (the timeline's rule): the counters are held flat over what is skipped.
        """
        period_ns = self.tick_ns
        k_now = (now_ns - self.t0_ns) // period_ns
        first = max(self._grid_k + 1, k_now - MAX_JOB_LAG_NS // period_ns + 1)
        for k in range(first, k_now + 1):
            g = self.t0_ns + k * period_ns
            self.clock.advance(g, self._rates(g, g + period_ns), until_ns=g + period_ns)
            self._last_tick_ns = g
        self.late_ticks += max(0, k_now - first)  # laid after their time (the last one is now's)
        self._grid_k = max(self._grid_k, k_now)
        return k_now

    def _counters_at(self, t_ns: int, ports: slice | None = None) -> np.ndarray:
        """The counters at ``t_ns`` as a read finds them: exact, the grid ticks up to ``t_ns`` laid
        first when the ticker is late, so an agent never answers a held value that the ticker's
        catch-up would revise upwards afterwards."""
        # past the newest grid segment's span (unlocked look: the common case costs nothing)
        if t_ns >= self.t0_ns + (self._grid_k + 1) * self.tick_ns:
            with self._tick_lock:
                self._lay_grid(t_ns)
        return self.clock.values_at(t_ns, ports)

    def _rates(self, a_ns: int, b_ns: int) -> np.ndarray:
        in_b, out_b, drop_b = self.timeline.window_bytes(a_ns, b_ns)
        dt = (b_ns - a_ns) / NS
        pkt = float(self.cfg.packet_bytes)
        rates = np.zeros((len(self.ports), len(METRICS)))
        rates[:, 0], rates[:, 1] = in_b / dt, out_b / dt
        rates[:, 2], rates[:, 3] = in_b / pkt / dt, out_b / pkt / dt
        rates[:, 5] = drop_b / pkt / dt
        return rates

    def _tick(self, now_ns: int, overrides: list[tuple[Any, Any]] | None = None) -> None:
        """Lay the counters' grid ticks up to ``now_ns`` (``_lay_grid``), then a fault's
        ``overrides`` at ``now_ns`` itself, and advance the queue model."""
        with self._tick_lock:  # the ticker's and a fault's (on the agents' loop) in time order
            now_ns = max(now_ns, self._last_tick_ns)
            k_now = self._lay_grid(now_ns)
            if overrides:  # a fault between grid ticks: its rates run to the next grid tick
                nxt = self.t0_ns + (k_now + 1) * self.tick_ns
                self.clock.advance(now_ns, self._rates(now_ns, nxt), until_ns=nxt, overrides=overrides)
            if self.queues is not None:  # keep the queues current: the timeline forgets old phases
                self.queues.advance_to(now_ns)
            self._last_tick_ns = now_ns
            self.ticks += 1
