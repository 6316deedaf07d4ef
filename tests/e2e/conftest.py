"""Browser end-to-end fixtures: a real Daphne server (own SQLite file, real Redis) and a real
headless Chromium driven by Playwright (Debian's /usr/bin/chromium — never `playwright install`).

Daphne is handed an already-bound listening socket (``--fd``), so parallel workers never race
for a port.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "test-output"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
USER, PASSWORD = "op-e2e", "op-e2e-password"


@dataclass
class LiveServer:
    url: str
    env: dict[str, str]
    proc: subprocess.Popen[bytes]

    def forget_fabric(self, name: str) -> None:
        """Delete a test's fabric, so later tests' collectors do not spend leases polling it."""
        self.manage("shell", "-c", f"from fabricmon.topology.models import Fabric; Fabric.objects.filter(name={name!r}).delete()")

    def manage(self, *args: str, stdin: bytes | None = None) -> str:
        done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], env=self.env, cwd=ROOT,
                              input=stdin, capture_output=True, timeout=120, check=False)
        if done.returncode:
            raise AssertionError(f"manage.py {' '.join(args)} failed:\n{done.stdout.decode()}\n{done.stderr.decode()}")
        return done.stdout.decode()


def server_env(tmp: Path, redis_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "DJANGO_SETTINGS_MODULE": "fabricmon.settings",
        "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
        "REDIS_URL": redis_url,
        "FABRICMON_VAR_DIR": str(tmp),
        "PYTHONUNBUFFERED": "1",
    })
    return env


def start_daphne(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "--fd", str(sock.fileno()), "fabricmon.asgi:application"],
        env=env, cwd=ROOT, pass_fds=[sock.fileno()], stdout=log.open("ab"), stderr=subprocess.STDOUT,
    )
    sock.close()  # the child holds its own copy
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{url}/accounts/login/", timeout=2) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"daphne did not come up; log:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


@pytest.fixture(scope="session")
def daphne_server(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("live-server")
    env = server_env(tmp, redis_url)
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput"], env=env, cwd=ROOT,
                          capture_output=True, timeout=180, check=False)
    if done.returncode:
        raise AssertionError(f"migrate failed:\n{done.stderr.decode()[-3000:]}")
    proc, url = start_daphne(env, tmp / "daphne.log")
    server = LiveServer(url=url, env=env, proc=proc)
    server.manage("create_demo_user", "--username", USER, "--password", PASSWORD, "--role", "operators")
    yield server
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, daphne_server: LiveServer) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    yield pg
    context.close()


@pytest.fixture
def log_in(page, daphne_server: LiveServer):
    """``log_in(next_path)``: through the real login form, landing on ``next_path``."""

    def do(next_path: str = "/") -> None:
        page.goto(f"{daphne_server.url}/accounts/login/?next={next_path}")
        page.fill("input[name=username]", USER)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_load_state()

    return do


@pytest.fixture
def screenshot(page):
    """``screenshot(name)`` → test-output/<name>.png (kept as test output)."""

    def do(name: str) -> Path:
        OUTPUT.mkdir(exist_ok=True)
        path = OUTPUT / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return do
