"""Browser end-to-end fixtures: a real Daphne server (own SQLite file, real Redis;
tests/asgi_server.py) and a real headless Chromium driven by Playwright (Debian's
/usr/bin/chromium — never `playwright install`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from asgi_server import LiveServer, live_server

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "test-output"
USER, PASSWORD = "op-e2e", "op-e2e-password"


@pytest.fixture(scope="session")
def daphne_server(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = live_server(tmp_path_factory.mktemp("live-server"), redis_url)
    server.manage("create_demo_user", "--username", USER, "--password", PASSWORD, "--role", "operators")
    yield server
    server.stop()


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
