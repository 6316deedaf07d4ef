"""A real Prometheus (Debian's /usr/bin/prometheus) in a temp dir, scraping one target, and its
HTTP query API.

It listens on a port the OS picks (``--web.listen-address=127.0.0.1:0``); Prometheus does not log
the port it got, so it is read from the kernel: the inodes of the process's sockets
(``/proc/PID/fd``) matched against the listening sockets of ``/proc/net/tcp``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROMETHEUS = "/usr/bin/prometheus"


def listening_port(pid: int) -> int | None:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        cols = line.split()
        if cols[3] == "0A" and cols[9] in inodes:  # 0A: TCP_LISTEN
            return int(cols[1].split(":")[1], 16)
    return None


@dataclass
class Prometheus:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's vector (``at``: evaluation time, Unix seconds)."""
        params = {"query": promql} | ({"time": f"{at:.3f}"} if at is not None else {})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}",
                                    timeout=10) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]["result"]

    def wait_for(self, promql: str, timeout_s: float = 60) -> list[dict[str, Any]]:
        """The first non-empty result of ``promql`` (polled), or an AssertionError with the log."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(promql)
            if result:
                return result
            assert time.monotonic() < deadline, f"no {promql} in {timeout_s} s; log:\n{self.log.read_text()[-3000:]}"
            time.sleep(0.5)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_prometheus(workdir: Path, target: str, token: str, *, scrape_interval_s: int = 1) -> Prometheus:
    """Prometheus scraping ``target`` (``host:port``) at ``/metrics`` with the bearer token, as the
    README tells an operator to configure it (``authorization.credentials_file``)."""
    (workdir / "token").write_text(token)
    config = workdir / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {scrape_interval_s}s\n  scrape_timeout: {scrape_interval_s}s\n"
        "scrape_configs:\n"
        "  - job_name: fabricmon\n"
        "    metrics_path: /metrics\n"
        "    authorization:\n"
        f"      credentials_file: {workdir / 'token'}\n"
        "    static_configs:\n"
        f"      - targets: ['{target}']\n"
    )
    log = workdir / "prometheus.log"
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
         "--web.listen-address=127.0.0.1:0", "--storage.tsdb.retention.time=1h"],
        cwd=workdir, stdout=log.open("ab"), stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while True:
        port = listening_port(proc.pid) if proc.poll() is None else None
        if port:
            url = f"http://127.0.0.1:{port}"
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return Prometheus(proc, url, log)
            except OSError:
                pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"prometheus did not come up; log:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
