"""Fixtures for collection tests: the twin as its own process, serving real UDP SNMP agents."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from telemetry_harness import TwinProcess


@pytest.fixture
def twin_process(fabric_name: str, tmp_path) -> Iterator[TwinProcess]:
    """4 servers x 4 GPUs, 2 spines (6 switches) as ``python -m twin``, with its control API."""
    tw = TwinProcess(fabric_name, tmp_path)
    try:
        yield tw
    finally:
        tw.stop()
