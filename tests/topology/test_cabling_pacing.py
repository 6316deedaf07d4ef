"""The cabling check reads a fabric's switches paced, not all at once (topology/cabling._read_all):
at 184 switches the burst stalled every gNMI telemetry stream for 2-6 s each minute. A pure unit:
the reads themselves are the real LLDP test's (tests/topology/test_lldp_real.py)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from fabricmon.topology import cabling


def test_reads_are_paced_bounded_and_keep_their_order(monkeypatch: pytest.MonkeyPatch) -> None:
    started: dict[str, float] = {}
    flight = {"now": 0, "max": 0}

    async def fake_read(sw, protocol):  # type: ignore[no-untyped-def]
        started[sw.name] = time.monotonic()
        flight["now"] += 1
        flight["max"] = max(flight["max"], flight["now"])
        try:
            await asyncio.sleep(0.05)
            if sw.name == "sw7":
                raise cabling.SnmpPollError("sw7: timeout")  # one failed read is its result, not the check's
            return [sw.name]
        finally:
            flight["now"] -= 1

    monkeypatch.setattr(cabling, "_read", fake_read)
    switches = tuple(SimpleNamespace(name=f"sw{i}") for i in range(20))
    t0 = time.monotonic()
    got = asyncio.run(cabling._read_all(switches, {}, reads_per_s=100.0, concurrency=3))  # type: ignore[arg-type]
    assert [g if isinstance(g, list) else "failed" for g in got] == [
        [f"sw{i}"] if i != 7 else "failed" for i in range(20)]
    assert flight["max"] <= 3
    # read i starts no sooner than i / reads_per_s (a lower bound: a sleep never ends early)
    for i in range(20):
        assert started[f"sw{i}"] - t0 >= i / 100.0 - 1e-3
    assert sorted(started, key=started.__getitem__) == [f"sw{i}" for i in range(20)]
