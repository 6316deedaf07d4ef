"""`make demo` and docker-compose.yml run the same commands, and those commands start.

No Docker engine runs here, so the compose file is checked against the demo's command table and
the demo itself is run end to end (real Redis, twin, Celery worker and beat, Daphne) until frames
reach the live window and the twin's job has reported its phase events to the jobs API.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from django.conf import settings

from fabricmon.demo import DEMO_SERVICES, SERVICE_COMMANDS, demo_keys, queue_names
from fabricmon.settings import fernet_keys

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
    assert {"redis", "postgres", "web", "worker", "evaluation", "delivery", "beat", "twin"} <= set(compose_services())


def _queues(command: list[str]) -> set[str]:
    return set(command[command.index("-Q") + 1].split(",")) if "-Q" in command else set()


def test_compose_runs_a_worker_per_queue_and_scales_the_collection_worker() -> None:
    """`docker compose up --scale worker=3`: the scaled service has no container_name and no host
    ports (either would make a second replica fail to start), and between them compose's workers
    consume every queue the product routes to, collection on the scaled one only."""
    services = compose_services()
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker
    assert _queues(worker["command"]) == {settings.FABRICMON_COLLECTOR_QUEUE}
    consumed = {name: _queues(services[name]["command"]) for name in ("worker", "evaluation", "delivery")}
    assert consumed["evaluation"] == {settings.FABRICMON_EVALUATION_QUEUE, settings.FABRICMON_IMPORT_QUEUE, "celery"}
    assert consumed["delivery"] == {settings.FABRICMON_DELIVERY_QUEUE}
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    routed |= {entry["options"].get("queue", "celery") for entry in settings.CELERY_BEAT_SCHEDULE.values()
               if entry["task"] not in settings.CELERY_TASK_ROUTES}
    assert routed <= set().union(*consumed.values()), routed


def test_the_demo_worker_consumes_what_a_plain_worker_would() -> None:
    """On a laptop one worker takes every queue but delivery's: the same ones CELERY_TASK_QUEUES
    gives a worker started without -Q, named from the same environment."""
    assert set(DEMO_SERVICES) <= set(SERVICE_COMMANDS) and "evaluation" not in DEMO_SERVICES
    plain = [q.name for q in settings.CELERY_TASK_QUEUES]
    assert set(queue_names(dict(os.environ))["worker_queues"].split(",")) == set(plain)
    assert settings.FABRICMON_DELIVERY_QUEUE not in plain
    env = {"FABRICMON_COLLECTOR_QUEUE": "c1", "FABRICMON_EVALUATION_QUEUE": "e1", "FABRICMON_IMPORT_QUEUE": "e1"}
    assert queue_names(env) == {"collection_queue": "c1", "evaluation_queues": "e1,celery",
                                "worker_queues": "c1,e1,celery"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_demo_makes_its_keys_once_owner_only_and_reuses_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env: dict[str, str] = {}
    demo_keys(env, tmp_path)
    files = {name: Path(env[f"{name}_FILE"]) for name in ("SECRET_KEY", "FABRICMON_SECRETS_KEY")}
    first = {name: path.read_text() for name, path in files.items()}
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in files.values())
    assert len(first["SECRET_KEY"].strip()) >= 50
    monkeypatch.setenv("FABRICMON_SECRETS_KEY_FILE", str(files["FABRICMON_SECRETS_KEY"]))
    assert len(fernet_keys("FABRICMON_SECRETS_KEY")) == 1  # a key the product accepts
    again: dict[str, str] = {}
    demo_keys(again, tmp_path)  # a second demo: the same keys (sessions and stored secrets survive)
    assert again == env and {n: p.read_text() for n, p in files.items()} == first
    configured = {"SECRET_KEY": "set-by-the-operator"}
    demo_keys(configured, tmp_path)
    assert "SECRET_KEY_FILE" not in configured and "FABRICMON_SECRETS_KEY_FILE" in configured


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
    # the twin's MoE job reported itself live: the demo's run holds its events and rank map
    m = re.search(r"demo: twin job run (\d+) \((\w+)\): (\d+) events posted, (\d+) dropped", output)
    assert m and int(m.group(3)) > 0, output
    assert oct((tmp_path / "twin-api-token").stat().st_mode & 0o777) == "0o600"
    counted = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", COUNT_SNIPPET.format(run_id=m.group(1))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    found = re.search(r"^COUNT (\d+) (\d+) (\S+)$", counted.stdout, re.M)
    assert found, counted.stdout + counted.stderr
    events, ranks, tags = found.groups()
    assert int(events) >= int(m.group(3)) > 0 and int(ranks) == 16, counted.stdout + counted.stderr
    assert "twin" in tags and "routing=pxn" in tags


def test_the_dashboard_answers_when_the_banner_says_it_runs(tmp_path: Path, redis_url: str) -> None:
    """A newcomer clicks the banner's link at once: before, it was printed as soon as the processes
    started, and the login page refused connections for the seconds the web server took to bind."""
    port = free_port()
    env = dict(os.environ)
    env.update(FABRICMON_VAR_DIR=str(tmp_path), DATABASE_URL=f"sqlite:///{tmp_path / 'demo.sqlite3'}",
               REDIS_URL=redis_url, FABRICMON_PORT=str(port))
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabricmon.demo", "--servers", "4", "--gpus-per-server", "4", "--spines", "2"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if "Dashboard" in line:
                url = re.search(r"(http://127\.0\.0\.1:\d+)/", line).group(1)  # type: ignore[union-attr]
                with urllib.request.urlopen(f"{url}/accounts/login/", timeout=10) as resp:
                    assert resp.status == 200
                break
        else:
            raise AssertionError("".join(seen))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)


COUNT_SNIPPET = (
    "from fabricmon.jobs import blocks; from fabricmon.jobs.models import Run; "
    "r = Run.objects.get(pk={run_id}); print('COUNT', blocks.event_count(r), r.ranks.count(), ','.join(r.tags))"
)


def test_the_demo_processes_give_back_what_a_burst_freed() -> None:
    """The allocator settings every demo process runs with (``MALLOC_ENV``, also the Dockerfile's):
    after bursts of large request bodies the process is back near where it started; with glibc's
    defaults the same bursts leave hundreds of MB resident (what the hour soak's web showed)."""
    from fabricmon.demo import MALLOC_ENV

    dockerfile = (ROOT / "Dockerfile").read_text()
    assert all(f"{k}={v}" in dockerfile for k, v in MALLOC_ENV.items())
    script = str(ROOT / "tests" / "malloc_burst.py")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}

    def after_bursts(env: dict[str, str]) -> list[int]:
        out = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, check=True)
        return [int(x) for x in out.stdout.split()]

    tuned = after_bursts({**clean, **MALLOC_ENV})
    default = after_bursts(clean)
    print(f"\nresident MB after three bursts: defaults {default}, demo settings {tuned}")
    assert max(tuned) < 120, tuned
    assert max(default) > 2 * max(tuned), (default, tuned)  # the settings are what makes the difference


def test_a_chosen_port_is_the_preferred_or_the_next_else_outside_the_ephemeral_range() -> None:
    """A port the demo or a bench picks stays unbound until its service starts, while the twin
    binds hundreds of ephemeral ports (an agent and a target per switch): the web port of a
    16,896-port bench was taken by a gNMI target. So: the preferred port or the next free one, and
    without a preference a free one below the kernel's ephemeral range."""
    from fabricmon.demo import _ephemeral_low, free_port

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        assert free_port(taken) not in (taken, 0) and taken < free_port(taken) < taken + 100
    low = _ephemeral_low()
    assert all(20_000 <= free_port() < low for _ in range(20))
