"""A real LLDP lab: one network namespace per switch and host, veth pairs as cables, Debian's
``lldpd`` in each, and per switch a net-snmp ``snmpd`` that serves lldpd's LLDP-MIB over AgentX::

    netns fm<pid>-leaf-r0 ─ lldpd -x ──AgentX (unix socket, a file: crosses namespaces)──▶ snmpd
         swp1 ══veth══ nic0  netns fm<pid>-node1 ─ lldpd           (udp 127.0.0.1:<port>, root ns)

snmpd listens on loopback of the root namespace (where fabricmon polls, as every other agent in
the tests); LLDP frames travel only on the veths between the namespaces made here. Every name
carries the test process's pid, and :meth:`LldpLab.stop` ends what it started by pid and deletes
its namespaces (links go with them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.agents.netsnmp import Snmpd, start_snmpd

LLDPD = shutil.which("lldpd") or "/usr/sbin/lldpd"
End = tuple[str, str]  # (node name, interface name)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@dataclass
class LldpLab:
    """The running lab: namespaces, lldpd processes and each switch's snmpd."""

    workdir: Path
    prefix: str
    sockets: Path  # lldpd's control sockets: a directory lldpd's unprivileged user can traverse
    namespaces: list[str] = field(default_factory=list)
    lldpd: list[subprocess.Popen[bytes]] = field(default_factory=list)
    snmpd: dict[str, Snmpd] = field(default_factory=dict)

    def ns(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def stop(self) -> None:
        for p in self.lldpd:
            if p.poll() is None:
                p.terminate()
        for p in self.lldpd:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for agent in self.snmpd.values():
            agent.stop()
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True, timeout=10)
        shutil.rmtree(self.sockets, ignore_errors=True)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
                         for p in sorted(self.workdir.glob("*.log")))  # fmt: skip


def start_lab(
    workdir: Path, switches: Sequence[str], hosts: Sequence[str], cables: Sequence[tuple[End, End]]
) -> LldpLab:
    """Namespaces for ``switches`` and ``hosts``, a veth per cable (interfaces named as given),
    lldpd everywhere (system name = node name, port id = interface name, 1 s transmit interval),
    snmpd per switch. On any failure what was started is stopped before raising."""
    workdir.mkdir(parents=True, exist_ok=True)
    # pytest's tmp dirs are 0700: lldpd's _lldpd user could not reach a control socket there
    sockets = Path(tempfile.mkdtemp(prefix=f"fm{os.getpid()}-lldpd-"))
    sockets.chmod(0o755)
    lab = LldpLab(workdir, f"fm{os.getpid()}", sockets)
    try:
        for node in (*switches, *hosts):
            _ip("netns", "add", lab.ns(node))
            lab.namespaces.append(lab.ns(node))
            _ip("-n", lab.ns(node), "link", "set", "lo", "up")
        for k, ((a, a_if), (b, b_if)) in enumerate(cables):
            tmp_a, tmp_b = f"v{os.getpid() % 100000}x{k}a", f"v{os.getpid() % 100000}x{k}b"
            _ip("link", "add", tmp_a, "netns", lab.ns(a), "type", "veth", "peer", "name", tmp_b,
                "netns", lab.ns(b))  # fmt: skip
            for ns, tmp, name in ((lab.ns(a), tmp_a, a_if), (lab.ns(b), tmp_b, b_if)):
                _ip("-n", ns, "link", "set", tmp, "name", name)
                _ip("-n", ns, "link", "set", name, "up")
        for node in switches:
            agentx = sockets / f"agentx-{node}.sock"
            lab.snmpd[node] = start_snmpd(
                workdir / f"snmpd-{node}",
                extra_config=("master agentx", f"agentXSocket unix:{agentx}", "agentXPerms 0777 0777"),
                extra_args=("-I", "-ifTable,ifXTable,interface"),  # the root namespace's are no switch's
            )
            _start_lldpd(lab, node, agentx)
        for node in hosts:
            _start_lldpd(lab, node, None)
    except BaseException:
        lab.stop()
        raise
    return lab


def _start_lldpd(lab: LldpLab, node: str, agentx: Path | None) -> None:
    conf = lab.sockets / f"lldpd-{node}.conf"  # read by lldpcli as _lldpd too
    conf.write_text(f"configure system hostname {node}\nconfigure lldp tx-interval 1\n"
                    "configure lldp portidsubtype ifname\n")  # fmt: skip
    args = [LLDPD, "-d", "-u", str(lab.sockets / f"lldpd-{node}.sock"), "-O", str(conf)]
    if agentx is not None:
        args += ["-x", "-X", str(agentx)]
    log = (lab.workdir / f"lldpd-{node}.log").open("wb")
    lab.lldpd.append(subprocess.Popen(["ip", "netns", "exec", lab.ns(node), *args], stdout=log,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))  # fmt: skip
    log.close()


def wait_for(predicate: object, timeout_s: float, what: str, lab: LldpLab) -> None:
    """Poll ``predicate()`` until true (LLDP needs a transmit interval or two to converge)."""
    assert callable(predicate)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} not within {timeout_s:g} s\n{lab.logs()}")


def snmp_ports(lab: LldpLab) -> Mapping[str, int]:
    return {node: agent.port for node, agent in lab.snmpd.items()}
