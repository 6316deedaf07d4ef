"""The probe's poster never blocks or raises into training, and loses nothing it can keep: a down
server or a 5xx/429 is retried with backoff (the same batch, idempotent by event id), a full
spool drops its oldest events and counts them (and the count rides on later batches), close()
keeps its deadline, and a refused token is said once. Pure (no torch, no Django): loopback
HTTP servers from the stdlib, a closed port, a TCP server that never answers."""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from collectors.probe import EventPoster, IngestClient
from collectors.probe.retry import Backoff, retry_after_s
from collectors.probe.spool import Spool


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: connections are refused


class Post:
    """One POST the loopback server saw: its NDJSON lines and headers."""

    def __init__(self, lines: list[bytes], headers: dict[str, str]) -> None:
        self.events = [json.loads(line) for line in lines]
        self.ids = [e["id"] for e in self.events]
        self.headers = headers


Answer = Callable[[int, Post], "tuple[int, dict, dict[str, str]] | None"]  # None: hang up, no answer


@contextmanager
def ingest_server(answer: Answer, clock: dict | None = None) -> Iterator[tuple[str, list[Post]]]:
    """A loopback HTTP server: ``answer(n, post)`` for the n-th POST (0-based) → (status, JSON body,
    extra headers), or None to read the request and close the connection without answering;
    ``clock``: what ``GET /jobs/api/clock`` answers (without it, a GET is a 501)."""
    posts: list[Post] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if clock is None or self.path != "/jobs/api/clock":
                self.send_error(501)
                return
            raw = json.dumps({"server_ns": time.time_ns(), **clock}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_POST(self) -> None:
            lines = self.rfile.read(int(self.headers["Content-Length"])).splitlines()
            post = Post(lines, dict(self.headers.items()))
            posts.append(post)
            got = answer(len(posts) - 1, post)
            if got is None:
                self.close_connection = True
                return
            status, body, extra = got
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", posts
    finally:
        server.shutdown()
        server.server_close()


def _taken(post: Post) -> tuple[int, dict, dict[str, str]]:
    n = len(post.ids)
    return 200, {"accepted": n, "stored": n, "duplicates": 0, "rejected_count": 0, "rejected": []}, {}


def _poster(base: str, **kw) -> EventPoster:  # type: ignore[no-untyped-def]
    kw = {"batch_size": 10, "flush_interval_s": 0.05, "measure_clock": False, "min_backoff_s": 0.01,
          "max_backoff_s": 0.05, **kw}  # fmt: skip
    return EventPoster(IngestClient(base, "fmj_x_y", timeout_s=5.0), 1, **kw)


@pytest.mark.parametrize("measure_clock", [True, False])
@pytest.mark.parametrize("fields", [None, ["send_bytes_per_pg_rank", "recv_bytes_per_pg_rank"]])
def test_per_pg_rank_lists_go_only_to_a_server_that_reads_them(measure_clock: bool, fields: list | None) -> None:
    """A server older than the lists ignores them (unknown keys): it gets the maps they stand for."""
    clock = {} if fields is None else {"event_fields": fields}
    with ingest_server(lambda n, post: _taken(post), clock=clock) as (base, posts):
        poster = _poster(base, measure_clock=measure_clock)
        deadline = time.monotonic() + 5
        while poster._fields_at is None and poster._clock_at is None and time.monotonic() < deadline:
            time.sleep(0.01)  # (the poster asks at its start; events submitted before it knows are maps)
        time.sleep(0.2)
        for i in range(3):
            poster.submit({"id": f"e{i}", "rank": i, "pg_ranks": [5, 0, 9],
                           "send_bytes_per_pg_rank": [1, 2, 3], "recv_bytes_per_pg_rank": [4, 5, 6]})
        assert poster.close(timeout_s=5.0).posted == 3
    sent = [e for p in posts for e in p.events]
    assert len(sent) == 3
    if fields is None:
        assert all(e["send_bytes_per_peer"] == {"5": 1, "0": 2, "9": 3} for e in sent), sent
        assert all(e["recv_bytes_per_peer"] == {"5": 4, "0": 5, "9": 6} for e in sent), sent
        assert not any("send_bytes_per_pg_rank" in e for e in sent)
    else:
        assert all(e["send_bytes_per_pg_rank"] == [1, 2, 3] and "send_bytes_per_peer" not in e for e in sent)


def test_unreachable_server_keeps_what_fits_and_counts_the_rest() -> None:
    poster = _poster(f"http://127.0.0.1:{_closed_port()}", max_buffer=25)
    for i in range(100):
        poster.submit({"id": str(i), "rank": 0})  # returns at once, whatever the network does
    stats = poster.close(timeout_s=1.0)
    assert stats.posted == 0
    assert (stats.dropped, stats.unsent, stats.lost) == (75, 25, 100)  # overflow + not sent by the deadline
    assert stats.failed_posts >= 1
    assert poster.close(timeout_s=0).lost == 100  # a second close repeats the report, counts nothing twice


def test_a_closed_poster_refuses_new_events_without_raising() -> None:
    poster = EventPoster(IngestClient(f"http://127.0.0.1:{_closed_port()}", "t"), 1, measure_clock=False)
    poster.close()
    poster.submit({"id": "late"})
    assert poster.stats.dropped == 1


def test_a_rate_limited_batch_is_posted_again_after_retry_after() -> None:
    """The first post is answered 429 (as the ingest API does over a token's limit) with a
    Retry-After header: the same batch is posted again after it, nothing lost."""
    def answer(n: int, post: Post):  # type: ignore[no-untyped-def]
        if n == 0:
            return 429, {"error": "rate limit", "field": "Authorization", "retry_after_s": 1}, {"Retry-After": "0"}
        return _taken(post)

    with ingest_server(answer) as (base, posts):
        poster = _poster(base)
        for i in range(10):
            poster.submit({"id": str(i), "rank": 0})
        assert poster.flush(timeout_s=20)
        stats = poster.close()
    assert [p.ids for p in posts] == [[str(i) for i in range(10)]] * 2  # the same batch twice
    assert (stats.rate_limited, stats.posted, stats.dropped, stats.failed_posts) == (1, 10, 0, 0)


def test_5xx_and_a_lost_answer_are_retried_and_the_server_dedups_the_repeat() -> None:
    """503, then a connection closed after the server read the batch (its answer lost: the server
    may have stored it), then accepted as duplicates: three posts of one batch, nothing dropped."""
    def answer(n: int, post: Post):  # type: ignore[no-untyped-def]
        if n == 0:
            return 503, {"error": "restarting"}, {}
        if n == 1:
            return None
        k = len(post.ids)
        return 200, {"accepted": k, "stored": 0, "duplicates": k, "rejected_count": 0, "rejected": []}, {}

    with ingest_server(answer) as (base, posts):
        poster = _poster(base)
        for i in range(10):
            poster.submit({"id": str(i), "rank": 0})
        assert poster.flush(timeout_s=20)
        stats = poster.close()
    assert len(posts) == 3 and posts[0].ids == posts[1].ids == posts[2].ids
    assert (stats.failed_posts, stats.posted, stats.duplicates, stats.dropped) == (2, 10, 10, 0)


def test_a_full_spool_drops_the_oldest_waiting_and_reports_the_count_with_later_batches() -> None:
    """The server fails until released. Batch 0-4 is in flight (kept: it may be stored); 25 more
    into a spool of 10 events: 20 of the oldest waiting go, the newest 5 stay. Later posts carry
    this poster's session and its running total of 20."""
    released = threading.Event()
    taken: list[Post] = []

    def answer(n: int, post: Post):  # type: ignore[no-untyped-def]
        if not released.is_set():
            return 503, {"error": "down"}, {}
        taken.append(post)
        return _taken(post)

    with ingest_server(answer) as (base, posts):
        poster = _poster(base, batch_size=5, max_buffer=10)
        for i in range(5):
            poster.submit({"id": str(i), "rank": 0})
        while not posts:  # the first batch is in flight and failing
            threading.Event().wait(0.01)
        for i in range(5, 30):
            poster.submit({"id": str(i), "rank": 0})
        released.set()
        assert poster.flush(timeout_s=20)
        stats = poster.close()
    assert [p.ids for p in taken] == [[str(i) for i in range(5)], [str(i) for i in range(25, 30)]]
    # (the retry of 0-4 may have left before the last drops: its total can be smaller)
    assert (taken[-1].headers["X-Probe-Session"], taken[-1].headers["X-Probe-Dropped"]) == (poster.session, "20")
    assert (stats.dropped, stats.posted, stats.unsent) == (20, 10, 0)


def test_a_batch_too_large_for_the_server_is_split_not_lost() -> None:
    def answer(n: int, post: Post):  # type: ignore[no-untyped-def]
        return (413, {"error": "too large", "field": "body"}, {}) if len(post.ids) > 3 else _taken(post)

    with ingest_server(answer) as (base, posts):
        poster = _poster(base)
        for i in range(10):
            poster.submit({"id": str(i), "rank": 0})
        assert poster.flush(timeout_s=20)
        stats = poster.close()
    assert sorted(i for p in posts if len(p.ids) <= 3 for i in p.ids) == sorted(str(i) for i in range(10))
    assert (stats.posted, stats.dropped) == (10, 0)


def test_a_refused_token_is_said_once_and_the_poster_stops(caplog: pytest.LogCaptureFixture) -> None:
    def answer(n: int, post: Post):  # type: ignore[no-untyped-def]
        return 401, {"error": "invalid or revoked API token", "field": "Authorization"}, {}

    with ingest_server(answer) as (base, posts), caplog.at_level(logging.WARNING, "collectors.probe"):
        poster = _poster(base)
        for i in range(10):
            poster.submit({"id": str(i), "rank": 0})
        poster.flush(timeout_s=20)
        for i in range(10, 200):  # after the refusal: dropped and counted, not posted, not logged
            poster.submit({"id": str(i), "rank": 0})
        stats = poster.close(timeout_s=5)
    assert len(posts) == 1
    assert stats.error == "401 invalid or revoked API token"
    assert (stats.dropped, stats.posted) == (200, 0)
    assert [r.levelname for r in caplog.records] == ["ERROR"]
    assert "refused this probe" in caplog.records[0].getMessage()


def test_close_keeps_its_deadline_against_a_server_that_never_answers() -> None:
    """A TCP server that accepts and never reads or answers, the client's timeout a minute:
    close(1 s) returns (the join below would fail at 30 s), naming the 10 events it could not send."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.extend(iter(lambda: listener.accept()[0], None)), daemon=True).start()
    try:
        poster = EventPoster(IngestClient(f"http://127.0.0.1:{listener.getsockname()[1]}", "t", timeout_s=60),
                             1, batch_size=10, flush_interval_s=0.05, measure_clock=False)  # fmt: skip
        for i in range(10):
            poster.submit({"id": str(i), "rank": 0})
        while not held:
            threading.Event().wait(0.01)
        result: list = []
        closer = threading.Thread(target=lambda: result.append(poster.close(timeout_s=1.0)))
        closer.start()
        closer.join(30)
        assert not closer.is_alive(), "close() did not return by its deadline"
        assert (result[0].unsent, result[0].posted) == (10, 0)
    finally:
        listener.close()
        for s in held:
            s.close()


def test_backoff_is_capped_jittered_and_reset() -> None:
    b = Backoff(base_s=0.1, cap_s=5.0, rng=random.Random(7))
    delays = [b.next_delay_s() for _ in range(40)]
    assert all(0 <= d <= 5.0 for d in delays) and max(delays[:3]) <= 0.4 and max(delays[10:]) > 1.0
    assert len(set(delays)) == len(delays)  # jittered: no two ranks in lock-step
    b.reset()
    assert b.next_delay_s() <= 0.1


def test_retry_after_in_seconds_as_a_date_or_in_the_body() -> None:
    assert retry_after_s({"Retry-After": "3"}, None) == 3.0
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, None, now_s=1445412480) == 10.0
    assert retry_after_s({}, {"retry_after_s": 2}) == 2.0
    assert retry_after_s({"Retry-After": "soon"}, {"retry_after_s": "x"}) is None


def test_the_spool_is_bounded_in_bytes_and_never_drops_what_is_in_flight() -> None:
    spool = Spool(max_events=100, max_bytes=30)
    assert [spool.add(b"x" * 10) for _ in range(3)] == [0, 0, 0]
    assert spool.take(2, 1 << 20) == [b"x" * 10] * 2
    assert spool.add(b"y" * 10) == 1  # the oldest waiting went, the in-flight two stayed
    assert spool.add(b"z" * 40) == 2  # nothing waiting is left to drop: 1 dropped + this one
    assert (len(spool), spool.size_bytes, spool.inflight) == (2, 20, [b"x" * 10] * 2)


# --- the file spool (spool_dir) ---------------------------------------------------------------------

def _segments(path) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(p.name for p in path.iterdir() if p.name.startswith("seg-"))


def test_a_spool_dir_keeps_what_close_could_not_send_for_the_next_poster(tmp_path) -> None:  # type: ignore[no-untyped-def]
    first = _poster(f"http://127.0.0.1:{_closed_port()}", spool_dir=tmp_path)
    with pytest.raises(ValueError, match="in use by another poster"):
        _poster(f"http://127.0.0.1:{_closed_port()}", spool_dir=tmp_path)
    for i in range(30):
        first.submit({"id": str(i), "rank": 0})
    assert first.close(timeout_s=0.3).unsent == 30
    assert _segments(tmp_path)
    with ingest_server(lambda n, post: _taken(post)) as (base, posts):
        second = _poster(base, spool_dir=tmp_path)
        second.submit({"id": "new", "rank": 0})
        assert second.flush(timeout_s=20)
        stats = second.close()
    assert [i for p in posts for i in p.ids] == [*(str(i) for i in range(30)), "new"]  # oldest first
    assert (stats.replayed, stats.posted, stats.lost) == (30, 31, 0)
    assert _segments(tmp_path) == []  # everything answered: nothing left to replay


def test_a_killed_training_process_loses_nothing_it_had_spooled(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL (as the OOM killer sends) while the server is down: the next poster posts all 50."""
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import sys, time\n"
        "from collectors.probe import EventPoster, IngestClient\n"
        f"p = EventPoster(IngestClient('http://127.0.0.1:{_closed_port()}', 't'), 1, measure_clock=False, "
        f"spool_dir={str(tmp_path)!r})\n"
        "for i in range(50):\n    p.submit({'id': str(i), 'rank': 0})\n"
        "print('spooled', flush=True)\ntime.sleep(600)\n"
    )
    root = Path(__file__).resolve().parents[2]
    job = subprocess.Popen([sys.executable, "-c", script], cwd=root, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "spooled"
    finally:
        job.kill()
        job.wait()
    with ingest_server(lambda n, post: _taken(post)) as (base, posts):
        poster = _poster(base, spool_dir=tmp_path)
        assert poster.flush(timeout_s=20)
        stats = poster.close()
    assert [i for p in posts for i in p.ids] == [str(i) for i in range(50)]
    assert (stats.replayed, stats.posted) == (50, 50)


def test_journal_segments_go_once_every_line_in_them_is_answered(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from collectors.probe.journal import Journal

    journal = Journal(tmp_path, segment_bytes=25)
    segs = [journal.append(b'{"id": "%d"}' % i) for i in range(6)]  # 11 bytes each: 2 per segment
    assert segs == [0, 0, 1, 1, 2, 2] and len(_segments(tmp_path)) == 3
    journal.release(segs[:3])
    assert _segments(tmp_path) == ["seg-000001.ndjson", "seg-000002.ndjson"]  # seg 0 done, seg 1 half
    assert journal.close() == 3
    again = Journal(tmp_path)  # a segment goes whole: line 2 (answered) comes back, a duplicate for the server
    assert [line for line, _ in again.replayed] == [b'{"id": "%d"}' % i for i in range(2, 6)]
    again.close()
