"""The exported topology.conf read by a real Slurm: Debian's ``slurmctld`` started on loopback (a
free port, auth/none, a generated slurm.conf in a temp dir), then ``scontrol show topology`` must
list the fabric's switches and nodes exactly as exported.

    spine0 spine1                  two SUs of a rail-optimized fabric, 40 servers x 2 GPUs:
    su0 (node[001-032])  su1 (node[033-040])      leaf_level="su"  (rails in comments)
    leaf-su0-r0 leaf-su0-r1 …                     leaf_level="rail" (Slurm warns, accepts)
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.core.whatif.scheduler_export import slurm_topology_conf

pytestmark = pytest.mark.integration

SLURM_CONF = """ClusterName=fabricmon
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={port}
AuthType=auth/none
CredType=cred/none
TopologyPlugin=topology/tree
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmUser=root
ProctrackType=proctrack/linuxproc
SelectType=select/cons_tres
SchedulerType=sched/builtin
MpiDefault=none
NodeName={nodes} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=all Nodes=ALL Default=YES
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _exported(conf: str) -> dict[str, str]:
    """SwitchName → its Nodes= or Switches= expression, from the exported file."""
    out = {}
    for line in conf.splitlines():
        m = re.match(r"SwitchName=(\S+) (Nodes|Switches)=(\S+)", line)
        if m:
            out[m.group(1)] = m.group(3)
    return out


def _scontrol_topology(tmp: Path, conf: str, hosts: str) -> str:
    (tmp / "state").mkdir()
    (tmp / "spool").mkdir()
    (tmp / "topology.conf").write_text(conf)
    (tmp / "slurm.conf").write_text(SLURM_CONF.format(port=_free_port(), d=tmp, nodes=hosts))
    env = {"SLURM_CONF": str(tmp / "slurm.conf"), "PATH": "/usr/sbin:/usr/bin:/bin"}
    ctld = subprocess.Popen(["nice", "-n", "19", shutil.which("slurmctld") or "/usr/sbin/slurmctld", "-D", "-i",
                             "-f", str(tmp / "slurm.conf")], env=env, cwd=tmp,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            run = subprocess.run(["scontrol", "show", "topology"], check=False, env=env, capture_output=True, text=True,
                                 timeout=30)
            if run.returncode == 0 and "SwitchName=" in run.stdout:
                return run.stdout
            assert ctld.poll() is None, (tmp / "slurmctld.log").read_text()[-2000:]
            assert time.monotonic() < deadline, run.stderr
            time.sleep(0.5)
    finally:
        ctld.terminate()
        ctld.wait(timeout=30)


@pytest.mark.parametrize("leaf_level", ["su", "rail"])
def test_scontrol_lists_the_exported_switches_and_nodes(tmp_path: Path, leaf_level: str) -> None:
    fabric = rail_optimized("slurmfab", servers=40, gpus_per_server=2, spines=2, uplinks_per_leaf=32)
    conf = slurm_topology_conf(fabric, leaf_level=leaf_level)
    shown = _scontrol_topology(tmp_path, conf, "node[001-040]")
    listed = {m.group(1): m.group(0) for m in re.finditer(r"SwitchName=(\S+) .*", shown)}
    exported = _exported(conf)
    assert set(listed) == set(exported)
    for name, expr in exported.items():
        kind = "Nodes" if f"SwitchName={name} Nodes=" in conf else "Switches"
        assert f"{kind}={expr}" in listed[name], (name, listed[name])
    levels = {name: int(re.search(r"Level=(\d+)", line).group(1)) for name, line in listed.items()}  # type: ignore[union-attr]
    assert {levels["spine0"], levels["spine1"]} == {1} and all(
        v == 0 for k, v in levels.items() if not k.startswith("spine"))
    assert "Nodes=node[001-040]" in listed["spine0"]  # every node reachable under each spine
