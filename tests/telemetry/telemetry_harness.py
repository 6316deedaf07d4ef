"""Helpers for collection tests: shard collectors on threads, exactly as a worker runs them.

Each collector thread runs ``services.run_shard`` exactly as a Celery worker would, with its own
long-lived event loop and pysnmp engine (thread-local), against the twin's real UDP agents and the
real Redis. Small fabrics (4 servers x 4 GPUs, 2 spines = 6 switches) and 0.5 s intervals keep each
test to seconds.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from fabricmon.core.topology.spec import FabricSpec
from fabricmon.core.topology.yaml_load import load_fabric
from fabricmon.telemetry import event_loop, services
from fabricmon.telemetry.shard_loop import PollRecord, ShardReport

INTERVAL_S = 0.5
REPO = Path(__file__).resolve().parents[2]


def collector_spec(spec: FabricSpec, interval_s: float = INTERVAL_S, timeout_s: float = 0.12,
                   retries: int = 1) -> FabricSpec:
    """The twin's fabric with collector timing fit for short tests (timeout x attempts < interval)."""
    return replace(spec, switches=tuple(
        replace(sw, snmp=replace(sw.snmp, interval_s=interval_s, timeout_s=timeout_s, retries=retries))
        for sw in spec.switches
    ))


@dataclass
class Collectors:
    """Shard collectors running on threads; ``records`` is every poll they made."""

    stop: threading.Event = field(default_factory=threading.Event)
    records: list[PollRecord] = field(default_factory=list)
    reports: dict[str, ShardReport] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, record: PollRecord) -> None:
        with self.lock:
            self.records.append(record)

    def by_switch(self) -> dict[str, list[PollRecord]]:
        out: dict[str, list[PollRecord]] = {}
        with self.lock:
            for rec in self.records:
                out.setdefault(rec.switch, []).append(rec)
        return out


@contextmanager
def run_collectors(specs: Sequence[FabricSpec] | None, shard_ids: Sequence[str], redis_url: str, *,
                   lease_s: float = 30.0, history: bool = False) -> Iterator[Collectors]:
    c = Collectors()

    def work(shard_id: str) -> None:
        try:
            c.reports[shard_id] = services.run_shard(
                shard_id, lease_s=lease_s, stop_event=c.stop, fabrics=specs, redis_url=redis_url,
                observer=c.observe, history=history)
        except BaseException as exc:  # surfaced by the test, not lost on the thread
            c.errors.append(exc)
        finally:
            event_loop.close_event_loop()

    threads = [threading.Thread(target=work, args=(s,), name=f"collector-{s}") for s in shard_ids]
    for t in threads:
        t.start()
    try:
        yield c
    finally:
        c.stop.set()
        for t in threads:
            t.join(15)
    assert not c.errors, c.errors


class TwinProcess:
    """The twin as its own process (``python -m twin``), like a real fabric of separate devices.

    Its agents then answer from their own CPU instead of competing with the collector for this
    process's GIL, so the collector's timestamps mean what they mean on a real network. Ground
    truth and faults go through the twin's HTTP control API.
    """

    def __init__(self, name: str, workdir: Path, *, servers: int = 4, gpus_per_server: int = 4,
                 spines: int = 2, seed: int = 7) -> None:
        self.topology_path = workdir / f"{name}.yaml"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "twin", "--name", name, "--servers", str(servers),
             "--gpus-per-server", str(gpus_per_server), "--spines", str(spines), "--seed", str(seed),
             "--snmp-port-base", "0", "--control-port", "0", "--write-topology", str(self.topology_path)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"control http://127\.0\.0\.1:(\d+)/", line)
        if not match:
            rest = self.proc.stdout.read() if self.proc.poll() is not None else ""
            self.stop()
            raise RuntimeError(f"twin did not start: {line}{rest}")
        self.control = f"http://127.0.0.1:{match.group(1)}"
        self.fabric = load_fabric(self.topology_path.read_text(), source=str(self.topology_path))

    def _call(self, method: str, path: str, **params: object) -> dict:
        req = urllib.request.Request(f"{self.control}{path}?{urllib.parse.urlencode(params)}", method=method)
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def true_rates(self, switch: str, t1_ns: int, t2_ns: int) -> dict[str, np.ndarray]:
        body = self._call("GET", "/truth", switch=switch, t1_ns=t1_ns, t2_ns=t2_ns)
        return {k: np.asarray(v, dtype=np.float64) for k, v in body.items() if k.endswith("_per_s")}

    def restart(self, switch: str) -> None:
        self._call("POST", "/fault/restart", switch=switch)

    def wrap(self, switch: str, seconds_to_wrap: float = 2.0) -> None:
        self._call("POST", "/fault/wrap", switch=switch, seconds=seconds_to_wrap)

    def set_unreachable(self, switch: str, on: bool = True) -> None:
        self._call("POST", "/fault/unreachable", switch=switch, on=int(on))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
