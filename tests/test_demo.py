"""`make demo` and docker-compose.yml run the same commands, and those commands start.

No Docker engine runs here, so the compose file is checked against the demo's command table and
the demo itself is run end to end (real Redis, twin, Celery worker and beat, Daphne) until frames
reach the live window.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fabricmon.demo import SERVICE_COMMANDS

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = re.compile(r"^\{\w+\}$")


def compose_services() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]


@pytest.mark.parametrize("name", sorted(SERVICE_COMMANDS))
def test_compose_runs_the_demo_commands(name: str) -> None:
    compose_cmd = compose_services()[name]["command"]
    demo_cmd = SERVICE_COMMANDS[name]
    assert len(compose_cmd) == len(demo_cmd), f"{name}: {compose_cmd} vs {demo_cmd}"
    for ours, theirs in zip(demo_cmd, compose_cmd, strict=True):
        if ours == "{python}":
            assert theirs == "python"
        elif not PLACEHOLDER.match(ours):
            assert ours == theirs, f"{name}: {ours!r} != {theirs!r}"


def test_compose_has_the_whole_stack() -> None:
    assert {"redis", "postgres", "web", "worker", "beat", "twin"} <= set(compose_services())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.integration
def test_demo_starts_everything_and_frames_flow(tmp_path: Path, redis_url: str) -> None:
    env = dict(os.environ)
    env.update(
        FABRICMON_VAR_DIR=str(tmp_path),
        DATABASE_URL=f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        REDIS_URL=redis_url,
        FABRICMON_PORT=str(free_port()),
    )
    result = subprocess.run(
        [sys.executable, "-m", "fabricmon.demo", "--servers", "4", "--gpus-per-server", "4", "--spines", "2",
         "--seconds", "25", "--check"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "fabricmon demo is running" in output
    frames = int(re.search(r"demo: (\d+) frames", output).group(1))
    assert frames >= 5, output
