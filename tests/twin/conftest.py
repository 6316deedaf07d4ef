"""Fixtures for the twin's tests: small fabrics, a running twin, net-snmp command helpers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from twin.cluster import Twin
from twin.config import TwinConfig

SMALL = {"servers": 4, "gpus_per_server": 4, "spines": 2}


@pytest.fixture(scope="module")
def small_twin() -> Iterator[Twin]:
    """A running 4 servers × 4 GPUs, 2 spines twin on ephemeral UDP ports (v2c). Do not fault it."""
    with Twin(TwinConfig(name="small", **SMALL)) as tw:
        yield tw
