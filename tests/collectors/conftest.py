"""Fixtures for the SNMP collector: real net-snmp agents on loopback, each in its own tmp dir."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.agents.netsnmp import Snmpd, V3User, start_snmpd

V3 = V3User("fmuser", "SHA", "authpass123", "AES", "privpass123")


@pytest.fixture(params=["fast", "pysnmp"])
def engine(request: pytest.FixtureRequest) -> str:
    """The poller engine under test: our own client (v2c, and v3 authPriv SHA/SHA-2/MD5 + AES), or
    pysnmp."""
    return str(request.param)


@pytest.fixture(scope="module")
def real_snmpd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Snmpd]:
    """snmpd serving this machine's own interfaces (v2c 'public' and v3 SHA/AES user)."""
    agent = start_snmpd(tmp_path_factory.mktemp("snmpd-real"), v3_users=(V3,))
    yield agent
    agent.stop()


TableAgent = Callable[..., tuple[Snmpd, Callable[[dict[str, object]], None]]]


@pytest.fixture
def table_agent(tmp_path: Path) -> Iterator[TableAgent]:
    """Factory: snmpd + pass_persist serving N synthetic ports; returns (agent, set_state)."""
    started: list[Snmpd] = []

    def start(
        ports: int = 8, state: dict[str, object] | None = None
    ) -> tuple[Snmpd, Callable[[dict[str, object]], None]]:
        state_path = tmp_path / f"state{len(started)}.json"

        def set_state(new: dict[str, object]) -> None:
            tmp = state_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(new))
            tmp.replace(state_path)  # atomic: the handler never reads half a file

        set_state(state or {})
        agent = start_snmpd(tmp_path / f"snmpd{len(started)}", iftable_ports=ports, iftable_state=state_path)
        started.append(agent)
        return agent, set_state

    yield start
    for agent in started:
        agent.stop()
