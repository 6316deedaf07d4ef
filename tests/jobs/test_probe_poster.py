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


def test_a_rate_limited_batch_is_posted_again_after_retry_after() -> None:
    """A loopback server answers the first post 429 (as the ingest API does over a token's limit),
    then accepts: the batch goes back to the buffer, posting pauses, nothing is lost."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    posts: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            lines = self.rfile.read(int(self.headers["Content-Length"])).splitlines()
            posts.append(len(lines))
            status, body = (
                (429, {"error": "rate limit", "field": "Authorization", "retry_after_s": 0.2})
                if len(posts) == 1
                else (200, {"accepted": len(lines), "rejected_count": 0, "rejected": []})
            )
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = IngestClient(f"http://127.0.0.1:{server.server_address[1]}", "fmj_x_y", timeout_s=5.0)
        poster = EventPoster(client, 1, batch_size=10, flush_interval_s=0.05, measure_clock=False)
        for i in range(10):
            poster.submit({"id": str(i), "rank": 0})
        assert poster.flush(timeout_s=20)
        stats = poster.close()
    finally:
        server.shutdown()
        server.server_close()
    assert posts == [10, 10]  # the same batch, once refused, once accepted
    assert (stats.rate_limited, stats.posted, stats.dropped, stats.failed_posts) == (1, 10, 0, 0)
