"""The live dashboard, measured in headless Chromium (Debian's, via Playwright).

1. End-to-end latency, twin → browser: the twin's counters (own process, real UDP SNMP agents) are
   polled by a real Celery collector every second; a frame's timestamp is the instant its counter
   values describe. Latency = the page drawing that column - that instant (same clock), p50/p95
   over ≥ 100 frames. Target: p95 ≤ poll interval + 250 ms.
2. Bytes per WebSocket update per port (target ≤ 4).
3. Browser cost per update for 4,096- and 16,384-port x 600-column heatmaps streaming at 1 Hz
   (frames appended to Redis; a full window preloaded): time per update measured in the page,
   main-thread busy time per update from CDP ``Performance.getMetrics`` (TaskDuration), and the
   longest main-thread task from ``PerformanceObserver('longtask')`` (it reports tasks > 50 ms).
   Targets at 16,384: ≤ 16 ms per update, no task over 50 ms.
   Side by side, the tool one would pick instead: plotly.js heatmap appended with
   ``Plotly.extendTraces`` (time as rows, maxPoints 600) in the same browser.

    .venv/bin/python bench/live.py [--frames 100] [--updates 30] [--skip-twin]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
import redis
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout, no install needed

from fabricmon.core.telemetry.frames import Frame
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.core.topology.yaml_dump import dump_fabric
from fabricmon.core.topology.yaml_load import load_fabric
from fabricmon.telemetry import live_window
from tests import secret_env

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
USER, PASSWORD = "bench", "bench-password"
LONGTASKS_JS = """
window.__longtasks = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__longtasks.push([e.startTime, e.duration]);
}).observe({ type: "longtask", buffered: true });
"""


class Stack:
    """Daphne (own SQLite, real Redis) on a pre-bound socket; helpers to run manage.py."""

    def __init__(self, workdir: Path, redis_url: str) -> None:
        self.workdir = workdir
        self.env = {**os.environ, "DJANGO_SETTINGS_MODULE": "fabricmon.settings",
                    "DATABASE_URL": f"sqlite:///{workdir / 'db.sqlite3'}", "REDIS_URL": redis_url,
                    "FABRICMON_VAR_DIR": str(workdir), "PYTHONUNBUFFERED": "1"}
        secret_env.apply(self.env)  # a bench stack: the test keys unless keys are configured
        self.manage("migrate", "--noinput")
        self.manage("create_demo_user", "--username", USER, "--password", PASSWORD)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.procs = [subprocess.Popen(
            [sys.executable, "-m", "daphne", "--fd", str(sock.fileno()), "fabricmon.asgi:application"],
            env=self.env, cwd=ROOT, pass_fds=[sock.fileno()], stdout=(workdir / "daphne.log").open("ab"),
            stderr=subprocess.STDOUT)]
        sock.close()
        wait_until(lambda: http_ok(f"{self.url}/accounts/login/"), 30, "daphne")

    def manage(self, *args: str) -> str:
        done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], env=self.env, cwd=ROOT,
                              capture_output=True, timeout=600, check=False)
        if done.returncode:
            raise SystemExit(f"manage.py {args[0]} failed: {done.stderr.decode()[-2000:]}")
        return done.stdout.decode()

    def load(self, spec) -> None:
        path = self.workdir / f"{spec.name}.yaml"
        path.write_text(dump_fabric(spec))
        self.manage("load_topology", str(path))

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def wait_until(predicate, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > end:
            raise SystemExit(f"{what} did not come up in {timeout_s:.0f} s")
        time.sleep(0.2)


def open_page(browser, stack: Stack, path: str):
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = context.new_page()
    page.add_init_script(LONGTASKS_JS)
    page.on("console", lambda msg: msg.type == "error" and print(f"browser console: {msg.text}", flush=True))
    page.on("pageerror", lambda err: print(f"browser error: {err}", flush=True))
    page.goto(f"{stack.url}/accounts/login/?next={urllib.parse.quote(path)}")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state()
    return page


def pct(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else float("nan")


# --- 1 + 2: twin → collector → browser -----------------------------------------------------------
def bench_twin(browser, stack: Stack, frames: int) -> dict[str, float]:
    name = f"benchtwin{uuid.uuid4().hex[:6]}"
    topo = stack.workdir / "twin.yaml"
    twin = subprocess.Popen([sys.executable, "-m", "twin", "--name", name, "--snmp-port-base", "0",
                             "--control-port", "0", "--write-topology", str(topo)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stack.procs.append(twin)
    line = twin.stdout.readline() if twin.stdout else ""
    if "control http" not in line:
        raise SystemExit(f"twin did not start: {line}")
    spec = load_fabric(topo.read_text())
    timing = {"interval_s": 1.0, "timeout_s": 0.3, "retries": 1}
    spec = replace(spec, switches=tuple(replace(sw, snmp=replace(sw.snmp, **timing)) for sw in spec.switches))
    stack.load(spec)
    queue = f"bench-{uuid.uuid4().hex[:6]}"
    env = {**stack.env, "FABRICMON_COLLECTOR_QUEUE": queue}
    log = stack.workdir / "worker.log"
    stack.procs.append(subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "fabricmon.celery", "worker", "-Q", queue,
         "--concurrency", "2", "--loglevel", "INFO", "--without-gossip", "--without-mingle",
         "-n", f"{queue}@%h"],
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT))
    wait_until(lambda: "ready." in log.read_text(), 60, "celery worker")
    # What beat does: hand every free shard to a collector (fabricmon.celery first, so the task is
    # sent through our broker rather than Celery's default app).
    enqueue = ("import fabricmon.celery; "
               "from fabricmon.telemetry.tasks import ensure_collectors; ensure_collectors()")
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "shell", "-c", enqueue],
                   env=env, cwd=ROOT, check=True, capture_output=True)
    page = open_page(browser, stack, f"/fabric/{name}/")
    page.wait_for_function("window.fabricmon && fabricmon.state.columns >= 1", timeout=90_000)
    start = page.evaluate("fabricmon.state.draws.length")
    print(f"twin: {len(build_port_index(spec))} ports, 1 s polls; collecting {frames} frames …", flush=True)
    page.wait_for_function(f"fabricmon.state.draws.length >= {start + frames}",
                           timeout=(frames * 3 + 60) * 1000, polling=1000)
    draws = page.evaluate("fabricmon.state.draws")[start:]
    n_ports = page.evaluate("fabricmon.heatmap.nPorts")
    lat = [d["at"] - d["ts"] for d in draws]
    page.context.close()
    return {"ports": n_ports, "frames": len(draws),
            "latency_p50_ms": pct(lat, 50), "latency_p95_ms": pct(lat, 95), "latency_max_ms": max(lat),
            "bytes_per_port": float(np.mean([d["bytes"] for d in draws])) / n_ports}


# --- 3: browser cost at 4,096 and 16,384 ports ------------------------------------------------------
def scale_spec(name: str, n_su: int):
    # 32 servers per SU x 8 rails, 32 down + 16 up per leaf, 4 spines: 64 x 8 x n_su ports (4,096 at 8 SU).
    return rail_optimized(name, servers=32 * n_su, gpus_per_server=8, spines=4, uplinks_per_leaf=16)


class Streamer(threading.Thread):
    """Appends one frame per second (a hot port that moves), like collectors at 1 Hz."""

    def __init__(self, r, spec, index) -> None:
        super().__init__(daemon=True)
        self.r, self.spec, self.index = r, spec, index
        self.stop = threading.Event()
        self.rng = np.random.default_rng(1)

    def frame(self, ts_ns: int, k: int) -> Frame:
        n = len(self.index)
        util = self.rng.uniform(0.05, 0.35, n).astype(np.float32)
        util[(k * 977) % n] = 0.95
        return Frame(self.spec.name, self.index.version, ts_ns, 1.0, {"util": util})

    def preload(self, cols: int) -> None:
        now = time.time_ns() // 10**9 * 10**9
        for i in range(cols):
            live_window.append(self.r, self.frame(now - (cols - i) * 10**9, i), max_frames=cols + 100)

    def run(self) -> None:
        k = 0
        next_t = time.time()
        while not self.stop.is_set():
            next_t += 1.0
            self.stop.wait(max(0.0, next_t - time.time()))
            live_window.append(self.r, self.frame(int(next_t * 1e9), k), max_frames=700)
            k += 1


def bench_scale(browser, stack: Stack, r, n_su: int, updates: int) -> dict[str, float]:
    spec = scale_spec(f"bench{n_su}su{uuid.uuid4().hex[:4]}", n_su)
    index = build_port_index(spec)
    stack.load(spec)
    streamer = Streamer(r, spec, index)
    streamer.preload(600)
    page = open_page(browser, stack, f"/fabric/{spec.name}/?window=600")
    page.wait_for_function(f"window.fabricmon && fabricmon.heatmap.nPorts === {len(index)}", timeout=120_000)
    streamer.start()
    page.wait_for_function("fabricmon.state.columns >= 2", timeout=60_000)  # past the window load
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    t0 = page.evaluate("performance.now()")
    m0 = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    c0 = page.evaluate("fabricmon.state.columns")
    u0 = page.evaluate("fabricmon.heatmap.updates.length")
    # Sleep rather than wait_for_function: its requestAnimationFrame polling would itself load the
    # main thread we are measuring.
    time.sleep(updates + 0.5)
    m1 = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    c1 = page.evaluate("fabricmon.state.columns")
    per_update = page.evaluate(f"fabricmon.heatmap.updates.slice({u0})")
    long_tasks = [d for s, d in page.evaluate("window.__longtasks") if s >= t0]
    streamer.stop.set()
    streamer.join()
    page.screenshot(path=str(ROOT / "test-output" / f"bench-live-{len(index)}.png"))
    page.context.close()
    n = c1 - c0
    return {"ports": len(index), "cols": 600, "updates": n,
            "update_ms_p50": pct(per_update, 50), "update_ms_max": max(per_update),
            "main_thread_ms_per_update": (m1["TaskDuration"] - m0["TaskDuration"]) * 1000 / n,
            "longtasks_over_50ms": len(long_tasks), "longest_task_ms": max(long_tasks, default=0.0)}


def bench_plotly(browser, stack: Stack, ports: int, updates: int) -> dict[str, float]:
    page = open_page(browser, stack, "/")
    page.add_script_tag(url=f"{stack.url}/static/vendor/plotly.min.js")
    result = page.evaluate("""async ([ports, updates]) => {
      const div = document.createElement("div"); div.style.width = "1200px"; div.style.height = "900px";
      document.body.append(div);
      const row = () => Float32Array.from({length: ports}, () => Math.random());
      const z = Array.from({length: 600}, row);
      await Plotly.newPlot(div, [{z, type: "heatmap", zmin: 0, zmax: 1}], {margin: {t: 10}});
      const times = [];
      for (let i = 0; i < updates; i++) {
        const t0 = performance.now();
        await Plotly.extendTraces(div, {z: [[row()]]}, [0], 600);
        times.push(performance.now() - t0);
        await new Promise((r) => setTimeout(r, 50));
      }
      return times;
    }""", [ports, updates])
    page.context.close()
    return {"ports": ports, "cols": 600, "updates": updates,
            "update_ms_p50": pct(result, 50), "update_ms_max": max(result)}


def fmt(d: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in d.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=100, help="frames for the twin latency (>= 100)")
    ap.add_argument("--updates", type=int, default=30, help="1 Hz updates per scale run")
    ap.add_argument("--skip-twin", action="store_true")
    ap.add_argument("--plotly-updates", type=int, default=5)
    args = ap.parse_args()
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    r = redis.Redis.from_url(redis_url)
    r.ping()
    (ROOT / "test-output").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp, sync_playwright() as pw:
        stack = Stack(Path(tmp), redis_url)
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            results = {}
            if not args.skip_twin:
                results["twin"] = twin = bench_twin(browser, stack, args.frames)
                print(f"end-to-end twin→browser: {fmt(twin)}", flush=True)
            for n_su in (8, 32):
                res = bench_scale(browser, stack, r, n_su, args.updates)
                results[f"canvas_{res['ports']}"] = res
                print(f"canvas heatmap (ours):   {fmt(res)}", flush=True)
            for ports in (1024, 4096):
                res = bench_plotly(browser, stack, ports, args.plotly_updates)
                results[f"plotly_{ports}"] = res
                print(f"plotly.js extendTraces:  {fmt(res)}", flush=True)
        finally:
            browser.close()
            stack.stop()
    big = results["canvas_16384"]
    line = ["BENCH live"]
    if "twin" in results:
        t = results["twin"]
        line += [f"latency_p50_ms={t['latency_p50_ms']:.0f}", f"latency_p95_ms={t['latency_p95_ms']:.0f}",
                 f"bytes_per_port={t['bytes_per_port']:.3f}"]
    line += [f"update_ms_16k_p50={big['update_ms_p50']:.2f}", f"update_ms_16k_max={big['update_ms_max']:.2f}",
             f"main_thread_ms_16k={big['main_thread_ms_per_update']:.2f}",
             f"longest_task_ms_16k={big['longest_task_ms']:.0f}",
             f"update_ms_4k_p50={results['canvas_4096']['update_ms_p50']:.2f}",
             f"plotly_ms_4k_p50={results['plotly_4096']['update_ms_p50']:.0f}"]
    print(" ".join(line))
    print(json.dumps(results, indent=1, default=float), file=sys.stderr)


if __name__ == "__main__":
    main()
