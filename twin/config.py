"""The twin's shape: the simulated cluster, its job, how its agents are served and whether the job
reports itself to fabricmon (``python -m twin`` flags map onto these fields).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from twin.moe import MoeConfig
from twin.routing import RoutingMode
from twin.snmp_v3 import V3User


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
