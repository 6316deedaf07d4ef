"""A fresh PostgreSQL database for one test (the server on 127.0.0.1:5432, or
``FABRICMON_TEST_PG_URL``): created before, dropped after. A missing server is a failure saying
how to reach one, never a skip."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ADMIN_URL = os.environ.get("FABRICMON_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture
def pg_database_url() -> Iterator[str]:
    with fresh_database(os.environ.get("FABRICMON_TEST_PG_PREFIX", "fabricmon_test_")) as url:  # (a prefix of its own per checkout)
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The test once on a fresh SQLite file and once on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'db.sqlite3'}"
    return str(request.getfixturevalue("pg_database_url"))


@contextmanager
def fresh_database(prefix: str) -> Iterator[str]:
    """A new database named ``prefix`` + 12 hex digits, dropped (connections and all) afterwards."""
    import psycopg  # (PostgreSQL tests only)

    name = f"{prefix}{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:  # pragma: no cover - environment problem
        pytest.fail(f"PostgreSQL tests need a server at {ADMIN_URL} ({exc}); set FABRICMON_TEST_PG_URL")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield ADMIN_URL.rsplit("/", 1)[0] + "/" + name
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
