"""Run a real net-snmp ``snmpd`` on loopback with its own config, for tests, the benchmark and
real-agent checks (reference/telemetry.md §3).

Everything lives in one work directory (config, log, persistent state), the agent binds
``udp:127.0.0.1:<free port>`` and runs in the foreground (``-f``), so the caller owns the process
and stops it by its pid. As root, snmpd keeps running as root: no ``-u`` is needed on loopback.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PASS_PERSIST_SCRIPT = Path(__file__).with_name("pass_persist_iftable.py")
IF_ROOTS = (".1.3.6.1.2.1.31.1.1.1", ".1.3.6.1.2.1.2.2.1")


@dataclass(frozen=True)
class V3User:
    """An SNMPv3 user created in the agent (``createUser``), read-only at ``authPriv``."""

    name: str
    auth_protocol: str = "SHA"
    auth_key: str = field(default="authpass123", repr=False)
    priv_protocol: str = "AES"
    priv_key: str = field(default="privpass123", repr=False)


@dataclass
class Snmpd:
    """A running snmpd: where it listens, its work directory and process."""

    port: int
    workdir: Path
    process: subprocess.Popen[bytes]

    @property
    def log(self) -> str:
        path = self.workdir / "snmpd.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_snmpd(
    workdir: Path,
    *,
    community: str = "public",
    v3_users: tuple[V3User, ...] = (),
    iftable_ports: int | None = None,
    iftable_state: Path | None = None,
    timeout_s: float = 10.0,
    extra_config: tuple[str, ...] = (),
    extra_args: tuple[str, ...] = (),
    port: int | None = None,
) -> Snmpd:
    """Start snmpd in ``workdir``. With ``iftable_ports`` the host's own IF-MIB is switched off and
    :mod:`pass_persist_iftable` serves that many synthetic ports instead. ``extra_config`` lines
    (other ``pass_persist`` tables, ``master agentx`` …) and ``extra_args`` go to snmpd as given.
    ``port``: listen there (an agent restarted where its collector knows it), else on a free one."""
    binary = shutil.which("snmpd") or "/usr/sbin/snmpd"
    workdir.mkdir(parents=True, exist_ok=True)
    lines = [f"rocommunity {community} 127.0.0.1"]
    for u in v3_users:
        lines.append(f'createUser {u.name} {u.auth_protocol} "{u.auth_key}" {u.priv_protocol} "{u.priv_key}"')
        lines.append(f"rouser {u.name} priv")
    args: list[str] = []
    if iftable_ports is not None:
        cmd = f"{sys.executable} {PASS_PERSIST_SCRIPT} --ports {iftable_ports}"
        if iftable_state is not None:
            cmd += f" --state {iftable_state}"
        lines += [f"pass_persist -p 1 {root} {cmd}" for root in IF_ROOTS]
        # Without this the built-in handlers still answer some columns for the host's interfaces.
        args = ["-I", "-ifTable,-ifXTable,-interfaces"]
    lines += extra_config
    args += extra_args
    env = {**os.environ, "SNMP_PERSISTENT_DIR": str(workdir / "persist"), "MIBS": ""}
    last_error = ""
    fixed = port
    for _attempt in range(5 if fixed is None else 1):  # a free port can be taken between probing and binding
        port = free_udp_port() if fixed is None else fixed
        conf = workdir / "snmpd.conf"
        conf.write_text("\n".join([f"agentAddress udp:127.0.0.1:{port}", *lines]) + "\n")
        log = workdir / "snmpd.log"
        log.write_text("")
        process = subprocess.Popen(
            [binary, "-f", "-Lf", str(log), "-C", "-c", str(conf), "-p", str(workdir / "snmpd.pid"), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        agent = Snmpd(port, workdir, process)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and process.poll() is None:
            if "NET-SNMP version" in agent.log:
                return agent
            time.sleep(0.02)
        last_error = agent.log[-2000:]
        agent.stop()
    raise RuntimeError(f"snmpd did not start in {workdir}: {last_error}")
