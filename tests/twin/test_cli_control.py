"""``python -m twin`` as a separate process: summary line, topology YAML, HTTP control API, SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from netsnmp_cli import net_snmp, parse_walk

from fabricmon.core.topology.yaml_load import load_fabric

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def _call(base: str, path: str, method: str = "GET") -> tuple[int, dict]:
    req = urllib.request.Request(base + path, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_cli_runs_writes_topology_serves_control_api_and_stops_on_sigterm(tmp_path: Path):
    topo = tmp_path / "twin.yaml"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "twin", "--name", "clitwin", "--servers", "4", "--gpus-per-server", "4",
         "--spines", "2", "--snmp-port-base", "0", "--control-port", "0", "--write-topology", str(topo)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r"control http://127\.0\.0\.1:(\d+)/status", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        base = f"http://127.0.0.1:{m.group(1)}"
        status, st = _call(base, "/status")
        assert status == 200 and st["fabric"] == "clitwin" and len(st["switches"]) == 6
        assert _call(base, "/ports?switch=leaf-r0")[1]["ports"][0]["peer"] == "node001 gpu0 mlx5_0"
        fabric = load_fabric(topo.read_text(), source=str(topo))
        assert {sw.name: sw.snmp.port for sw in fabric.switches} == {k: v["port"] for k, v in st["switches"].items()}
        time.sleep(0.5)
        now = time.time_ns()
        status, truth = _call(base, f"/truth?switch=leaf-r0&t1_ns={now - 300_000_000}&t2_ns={now}")
        assert status == 200 and len(truth["in_octets_per_s"]) == 8 and truth["peer"][0] == "node001 gpu0 mlx5_0"
        status, hot = _call(base, f"/hottest?t1_ns={now - 300_000_000}&t2_ns={now}")
        assert status == 200 and hot["switch"].startswith("leaf-r")
        # Faults over HTTP reach the agents.
        port = st["switches"]["leaf-r3"]["port"]
        status, _ = _call(base, "/fault/unreachable?switch=leaf-r3&on=1", "POST")
        assert status == 200
        res = net_snmp("snmpget", "-v2c", "-c", "public", "-t", "0.3", "-r", "0", f"127.0.0.1:{port}", "1.3.6.1.2.1.1.3.0")
        assert "Timeout" in res.stderr
        _call(base, "/fault/unreachable?switch=leaf-r3&on=0", "POST")
        res = net_snmp("snmpget", "-v2c", "-c", "public", "-On", f"127.0.0.1:{port}", "1.3.6.1.2.1.1.5.0")
        assert parse_walk(res.stdout)["1.3.6.1.2.1.1.5.0"] == 'STRING: "leaf-r3"'
        assert _call(base, "/fault/restart?switch=leaf-r3", "POST")[0] == 200
        assert _call(base, "/fault/wrap?switch=leaf-r3&seconds=5", "POST")[0] == 200
        # Bad input: a clear 4xx naming the problem.
        code, err = _call(base, "/fault/restart?switch=nope", "POST")
        assert code == 404 and "nope" in err["error"]
        code, err = _call(base, "/truth?switch=leaf-r0&t1_ns=abc&t2_ns=1")
        assert code == 400 and "t1_ns" in err["error"]
        code, err = _call(base, "/truth?t1_ns=1&t2_ns=2")
        assert code == 400 and "history" in err["error"]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert rc == 0
