"""Many workers, one database: three collection workers on PostgreSQL, and one killed with ``kill -9``.

    twin (6 SNMP switches, 1 s polls) ◀──UDP── worker w0 ┐  celery worker -Q collection (compose's
                                      ◀──UDP── worker w1 ├─ `worker` command, --scale worker=3):
                                      ◀──UDP── worker w2 ┘  2 shards, a holder and a standby each
    beat ──ensure_collectors / alerts.evaluate──▶ Redis ──▶ evaluation worker (compose's `evaluation`)
    every process ──▶ one PostgreSQL database (fm_workers_…), Redis (live window, leases)

The test waits until each shard's standby sits in another worker than its holder, makes one switch
unreachable for 8 s (a target_down alert), then sends SIGKILL to the whole process group
of a worker holding a lease (main process and pool children: as a host dies) and lets the others
carry on. From what was written — the live window's frames, the poll journal every collector
process appended to (FABRICMON_POLL_JOURNAL_DIR), and the PostgreSQL tables — it measures:

* takeover: kill → the first poll of each of the victim's shards by another worker (≤ 2 intervals);
* lost ticks: ticks between the first and the last frame without a frame (0: the new holder frames
  the ticks nobody framed, with the last reads the dead one left in Redis — the design allows none);
* double polls: a tick of a switch polled twice, or a switch polled by two processes at once (0);
* the history frames and the alert rows are in PostgreSQL (no SQLite file was made).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest
import redis
from poll_checks import double_polls
from telemetry_harness import REPO

from fabricmon.core.topology.port_index import build_port_index
from fabricmon.demo import SERVICE_COMMANDS, fill
from fabricmon.telemetry import live_window, poll_journal
from fabricmon.telemetry.leases import holder, is_weak, standby, worker_of
from tests.jobs.pg_database import fresh_database

pytestmark = pytest.mark.integration
INTERVAL_S = 1.0  # the twin's topology: every switch polled each second
NS = 1_000_000_000
WORKERS = 3


class Stack:
    """The processes of the run, each in its own process group, logs under ``logs``."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs = env, logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str]) -> None:
        with (self.logs / f"{name}.log").open("wb") as log:
            self.procs[name] = subprocess.Popen(argv, cwd=REPO, env=self.env, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True)

    def manage(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=self.env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def alive(self) -> None:
        dead = [n for n, p in self.procs.items() if p.poll() is not None and n != "killed"]
        assert not dead, "\n".join(f"{n} exited:\n{self.tail(n)}" for n in dead)

    def tail(self, name: str, chars: int = 3000) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait(what: str, predicate, timeout_s: float, stack: Stack) -> float:
    started = time.monotonic()
    while not predicate():
        stack.alive()
        assert time.monotonic() - started < timeout_s, f"no {what} within {timeout_s:.0f} s"
        time.sleep(0.1)
    return time.monotonic() - started


def _placed(r: redis.Redis, shards: list[str]) -> bool:
    """Every shard has a holder and a standby, in different workers."""
    for shard in shards:
        h, s = holder(r, shard), standby(r, shard)
        if h is None or s is None or is_weak(h, s):
            return False
    return True


def _worker_main(pid: int) -> int:
    """The worker main process of a pool child (its parent)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_database("fm_workers_") as url:
        yield url


def test_three_workers_on_postgresql_survive_a_kill_9(twin_process, fabric_name, redis_url, pg_url,
                                                       tmp_path) -> None:
    journal, logs = tmp_path / "polls", tmp_path / "logs"
    logs.mkdir()
    queues = {"collection": f"collect-{fabric_name}", "evaluation": f"eval-{fabric_name}",
              "imports": f"imports-{fabric_name}", "delivery": f"deliver-{fabric_name}"}
    env = {
        **os.environ, "PYTHONPATH": str(REPO), "DJANGO_SETTINGS_MODULE": "fabricmon.settings",
        "DATABASE_URL": pg_url, "REDIS_URL": redis_url, "CELERY_BROKER_URL": redis_url,
        "FABRICMON_VAR_DIR": str(tmp_path / "var"),
        # queues of this test only: other tests' workers on the same Redis never take its tasks
        "FABRICMON_COLLECTOR_QUEUE": queues["collection"], "FABRICMON_EVALUATION_QUEUE": queues["evaluation"],
        "FABRICMON_IMPORT_QUEUE": queues["imports"], "FABRICMON_DELIVERY_QUEUE": queues["delivery"],
        "FABRICMON_SHARD_SIZE": "3",  # 6 switches → 2 shards
        "FABRICMON_POLL_JOURNAL_DIR": str(journal),
        "FABRICMON_HISTORY_STEP_S": "5",  # history rows in PostgreSQL within the run
        # beat every second: the stack is placed sooner (a takeover never waits for beat: the
        # standby is already running beside the holder)
        "FABRICMON_ENSURE_COLLECTORS_S": "1",
        "FABRICMON_CABLING_CHECK_S": "3600", "LOG_LEVEL": "INFO",
    }
    values = {"python": sys.executable, "worker_queues": queues["collection"], "worker_concurrency": "3",
              "evaluation_queues": f"{queues['evaluation']},{queues['imports']}", "evaluation_concurrency": "1",
              "beat_schedule": str(tmp_path / "celerybeat-schedule")}
    stack = Stack(env, logs)
    stack.manage("migrate", "--no-input", "-v", "0")
    assert "loaded fabric" in stack.manage("load_topology", str(twin_process.topology_path))
    shards = [f"{fabric_name}:0", f"{fabric_name}:1"]
    r = redis.Redis.from_url(redis_url)
    try:
        # the compose services' commands; each worker its own node name, as on its own host
        for i in range(WORKERS):
            stack.start(f"w{i}", [*fill(SERVICE_COMMANDS["worker"], values), "-n", f"w{i}-{fabric_name}@%h"])
        stack.start("evaluation", fill(SERVICE_COMMANDS["evaluation"], values))
        stack.start("beat", fill(SERVICE_COMMANDS["beat"], values))
        placed_s = _wait("holder and standby in different workers for both shards",
                         lambda: _placed(r, shards), 90, stack)
        time.sleep(4)
        down = twin_process.fabric.switches[0].name
        # target_down fires after 3 windows without data and 2 s more: 8 s leaves room for late evaluation
        twin_process.set_unreachable(down)
        time.sleep(8)
        twin_process.set_unreachable(down, on=False)
        time.sleep(6)
        # the victim: the worker of shard 0's holder, its whole process group (as a host dies)
        token = holder(r, shards[0])
        assert token is not None
        victim_pid = _worker_main(int(token.split(":")[1]))
        victim_worker = worker_of(token)
        victim_shards = [s for s in shards if (t := holder(r, s)) is not None and worker_of(t) == victim_worker]
        name = next(n for n, p in stack.procs.items() if p.pid == victim_pid)
        killed_ns = time.time_ns()
        os.killpg(victim_pid, signal.SIGKILL)
        stack.procs["killed"] = stack.procs.pop(name)
        stack.procs["killed"].wait()
        time.sleep(15)
        stack.alive()
    finally:
        stack.stop()
        r.delete(*queues.values())

    polls = list(poll_journal.read(journal))
    frames = [f for _, f in live_window.read_window(r, fabric_name)]
    r.close()
    ticks = np.array(sorted({f.ts_ns for f in frames}), dtype=np.int64)
    lost_ticks = int((np.diff(ticks) // round(INTERVAL_S * NS) - 1).sum())
    shard_of = {x["switch"]: x["shard"] for x in polls}
    takeovers_s = {}
    for shard in victim_shards:
        after = [x["started"] for x in polls
                 if x["shard"] == shard and x["worker"] != victim_worker and x["started"] > killed_ns]
        takeovers_s[shard] = (min(after) - killed_ns) / NS if after else float("inf")
    first_frame_s = (min(int(t) for t in ticks if t > killed_ns) - killed_ns) / NS
    doubles = double_polls(polls)
    gap = _gap_ticks(frames, [sw for sw, s in shard_of.items() if s in victim_shards], twin_process.fabric,
                     killed_ns)
    history_rows, alert_kinds = _in_postgres(pg_url, fabric_name)
    print(f"\nplaced in {placed_s:.1f} s; killed {name} (pid {victim_pid}, held {victim_shards}); "
          f"takeover {({s: round(t, 2) for s, t in takeovers_s.items()})} s; first tick after the kill "
          f"with a frame {first_frame_s:.2f} s after it; frames {len(ticks)}, lost ticks {lost_ticks}, double polls {len(doubles)}, "
          f"polls {len(polls)} by {len({x['pid'] for x in polls})} processes in "
          f"{len({x['worker'] for x in polls})} workers; ticks after the kill with the victim's switches "
          f"without data {gap}; PostgreSQL: {history_rows} history rows, alerts {alert_kinds}")
    assert victim_shards and all(t <= 2 * INTERVAL_S for t in takeovers_s.values()), takeovers_s
    assert lost_ticks == 0
    assert doubles == [], doubles[:5]
    assert len({x["worker"] for x in polls}) >= 2  # the shards really were collected by several workers
    assert history_rows > 0 and "target_down" in alert_kinds
    assert not list((tmp_path / "var").glob("*.sqlite3")), "a SQLite database was made"


def _gap_ticks(frames, switches: list[str], fabric, killed_ns: int) -> int:
    """Frames after the kill in which no port of the victim's switches has data (the takeover gap)."""
    index = build_port_index(fabric)
    mine = np.isin(index.switch_of, [index.switch_names.index(s) for s in switches])
    return sum(1 for f in frames if f.ts_ns > killed_ns and not np.isfinite(f.metrics["in_bps"][mine]).any())


def _in_postgres(url: str, fabric: str) -> tuple[int, list[str]]:
    """History rows of the fabric and the kinds of its alerts, read from PostgreSQL itself."""
    with psycopg.connect(url) as con:
        rows = con.execute("SELECT count(*) FROM telemetry_historyframe h JOIN topology_fabric f "
                           "ON f.id = h.fabric_id WHERE f.name = %s", (fabric,)).fetchone()
        kinds = con.execute("SELECT DISTINCT kind FROM alerts_alert WHERE fabric = %s", (fabric,)).fetchall()
    return int(rows[0]), sorted(k for (k,) in kinds)
