"""The probe's poster never blocks or raises into training: an unreachable server or a full
buffer drops events and counts them. Pure (no torch, no Django): a closed loopback port."""

from __future__ import annotations

import socket

from collectors.probe import EventPoster, IngestClient


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: connections are refused


def test_unreachable_server_drops_and_counts() -> None:
    client = IngestClient(f"http://127.0.0.1:{_closed_port()}", "fmj_x_y", timeout_s=1.0)
    poster = EventPoster(client, 1, batch_size=10, max_buffer=25, flush_interval_s=0.05)
    for i in range(100):
        poster.submit({"id": str(i), "rank": 0})  # returns at once, whatever the network does
    stats = poster.close(timeout_s=10)
    assert stats.posted == 0
    assert stats.dropped == 100  # buffer overflow + failed posts, all counted
    assert stats.failed_posts >= 1


def test_a_closed_poster_refuses_new_events_without_raising() -> None:
    poster = EventPoster(IngestClient(f"http://127.0.0.1:{_closed_port()}", "t"), 1, measure_clock=False)
    poster.close()
    poster.submit({"id": "late"})
    assert poster.stats.dropped == 1
