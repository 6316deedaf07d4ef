"""``python -m twin --gnmi`` as a separate process: gNMI ports in the summary and the topology
YAML, a real gNMI Get on one of them, queue truth over the control API."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from pygnmi.spec.v080 import gnmi_pb2 as pb
from pygnmi.spec.v080 import gnmi_pb2_grpc as pbg

from fabricmon.core.topology.yaml_load import load_fabric

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def test_cli_gnmi_ports_in_topology_and_queue_truth(tmp_path: Path) -> None:
    topo = tmp_path / "twin.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "twin", "--name", "gcli", "--servers", "2", "--gpus-per-server", "2",
         "--spines", "1", "--snmp-port-base", "0", "--gnmi", "--write-topology", str(topo)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        m = re.search(r"control http://127\.0\.0\.1:(\d+)/status", line)
        assert m and "gNMI on 127.0.0.1:" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        base = f"http://127.0.0.1:{m.group(1)}"
        with urllib.request.urlopen(base + "/status", timeout=10) as r:
            st = json.loads(r.read())
        fabric = load_fabric(topo.read_text(), source=str(topo))
        ports = {sw.name: sw.gnmi.port for sw in fabric.switches if sw.gnmi is not None}
        assert len(ports) == len(fabric.switches)
        assert ports == {k: v["gnmi_port"] for k, v in st["switches"].items()}
        with grpc.insecure_channel(f"127.0.0.1:{ports['leaf-r0']}") as ch:
            path = pb.Path(elem=[pb.PathElem(name="interfaces"), pb.PathElem(name="interface", key={"name": "*"}),
                                 pb.PathElem(name="state"), pb.PathElem(name="counters"),
                                 pb.PathElem(name="out-octets")])
            got = pbg.gNMIStub(ch).Get(pb.GetRequest(path=[path], encoding=pb.PROTO), timeout=10)
        n = got.notification[0]
        assert n.timestamp > 0 and len(n.update) == len(fabric.switch("leaf-r0").ports)
        time.sleep(0.5)
        now = time.time_ns()
        with urllib.request.urlopen(f"{base}/queue?switch=leaf-r0&t1_ns={now - 400_000_000}&t2_ns={now}",
                                    timeout=10) as r:
            q = json.loads(r.read())
        assert len(q["watermark_bytes"]) == len(fabric.switch("leaf-r0").ports)
        assert all(v >= 0 for v in q["q_ecn_marked_pkts"]) and len(q["pfc_tx_frames"]) == len(q["peer"])
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        for f in (proc.stdout, proc.stderr):
            if f:
                f.close()
