"""Run net-snmp's command-line tools (the real C client) against the twin's agents."""

from __future__ import annotations

import os
import subprocess


def net_snmp(tool: str, *args: str, tmp_dir: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a net-snmp CLI tool with no MIB loading and a private persistent dir."""
    env = {**os.environ, "MIBS": "", "SNMP_PERSISTENT_DIR": tmp_dir or "/tmp/fabricmon-twin-tests-snmp"}
    return subprocess.run([tool, *args], capture_output=True, text=True, env=env, timeout=30, check=False)


def parse_walk(stdout: str) -> dict[str, str]:
    """``-On`` output lines ``.1.3.6… = TYPE: value`` → {oid (no leading dot): "TYPE: value"}."""
    out = {}
    for line in stdout.splitlines():
        if " = " in line:
            oid, val = line.split(" = ", 1)
            out[oid.lstrip(".")] = val
    return out
