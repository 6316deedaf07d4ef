"""Columnar event storage: the fast batch parser agrees with the careful validator line by line,
stored blocks read back as the same events, and matrices add up across batches."""

from __future__ import annotations

import json

import numpy as np
from django.contrib.auth import get_user_model
from django.db import connection

from fabricmon.jobs import services
from fabricmon.jobs.columns import columns_from_rows, decode_block, encode_block, id_hashes
from fabricmon.jobs.fastparse import parse_ndjson_columns
from fabricmon.jobs.models import EventKey, RecentEventKey, Run, TrafficMatrix
from fabricmon.jobs.validation import parse_ndjson

T0 = 1_795_987_668_367_402_543


def _event(i: int, **over) -> dict:
    e = {
        "id": f"x{i}",
        "rank": i % 3,
        "step": i // 6,
        "layer": 0,
        "phase": "combine",
        "pg_ranks": [0, 1, 2],
        "start_ns": T0 + 10 * i,
        "end_ns": T0 + 10 * i + 5,
        "source": "probe",
        "send_bytes_per_peer": {str(d): 100 * i + d for d in range(3)},
        "recv_bytes_per_peer": {str(d): 7 for d in range(3)},
    }
    e.update(over)
    return e


MIXED = [
    _event(0),
    _event(1, send_bytes_per_peer={"0": 1, "1": -2}),  # negative
    _event(2, send_bytes_per_peer={" 1": 5}),  # not a rank
    _event(3, bytes_sent=1),  # differs from the peer sum
    _event(4, id=None),  # no id: derived from the content
    _event(5, end_ns=T0),  # ends before it starts
    _event(6, step=2**70),  # beyond int64
    _event(7, pg_ranks=[0, "1"]),
    _event(8, send_bytes_per_peer=None, recv_bytes_per_peer={}),
    _event(9, collective="", host=None, clock_offset_ns=-3),
    _event(10, send_bytes_per_peer=[1, 2]),
    _event(11, send_bytes_per_peer={"1": 12345678901234567890}),
]


def test_fast_parser_agrees_with_the_careful_validator() -> None:
    for dumps in (lambda e: json.dumps(e).encode(), lambda e: json.dumps(e, separators=(",", ":")).encode()):
        body = b"\n".join(dumps(e) for e in MIXED) + b"\n\n" + b'{"rank": 1'
        cols, errors, lines = parse_ndjson_columns(body, clock_offset_ns=11)
        old = parse_ndjson(body, clock_offset_ns=11)
        assert lines == old.lines
        assert [e.as_dict() for e in errors] == [e.as_dict() for e in old.errors]
        expected = columns_from_rows(old.rows, old.peers)
        order = np.argsort(np.array(cols.event_id)), np.argsort(np.array(expected.event_id))
        got, want = decode_block(encode_block(cols.take(order[0]))), expected.take(order[1])
        for name in (
            "event_id",
            "rank",
            "step",
            "start_ns",
            "bytes_sent",
            "send_n",
            "send_peer",
            "recv_bytes",
            "pg_ranks",
            "collective",
        ):
            assert np.array_equal(np.asarray(getattr(got, name)), np.asarray(getattr(want, name))), name


def test_blocks_read_back_and_matrices_add_across_batches(db) -> None:
    run = Run.objects.create(owner=get_user_model().objects.create_user("c"), name="r")
    events = [_event(i) for i in range(12)]
    for part in (events[:5], events[5:], events[3:8]):  # the last batch is all duplicates
        services.ingest_ndjson(run, b"\n".join(json.dumps(e).encode() for e in part))
    assert services.event_count(run) == 12 and len(set(id_hashes(services.event_ids(run)))) == 12
    back = list(services.iter_events(run))
    assert [b["event_id"] for b in back] == [e["id"] for e in events]
    assert back[4]["send_bytes_per_peer"] == events[4]["send_bytes_per_peer"]
    assert back[4]["pg_ranks"] == [0, 1, 2] and back[4]["step"] == 0 and back[4]["bytes_recv"] == 21
    step0 = services.event_columns(run, step=0, phase="combine", source="probe")
    assert step0.event_id == [f"x{i}" for i in range(6)]
    m = TrafficMatrix.objects.get(run=run, step=0, layer=0, phase="combine")
    want = np.zeros((3, 3), dtype=np.int64)
    for e in events[:6]:
        for d, b in e["send_bytes_per_peer"].items():
            want[e["rank"], int(d)] += b
    assert np.array_equal(m.sent_array(), want) and m.calls == 6


def test_id_hash_does_not_depend_on_the_batch() -> None:
    alone = id_hashes(["x7"])[0]
    assert id_hashes(["a-much-longer-event-id", "x7"])[1] == alone
    assert len(set(id_hashes(["x7", "x7\x00", "x70", "7x", "é7"]).tolist())) == 5


def test_duplicates_are_found_in_both_key_tables_across_merges(db, monkeypatch) -> None:
    """SQLite keeps the newest keys in RecentEventKey and moves them to EventKey every
    KEY_MERGE_BLOCKS blocks: a re-post must be caught whichever table holds its keys, a run's
    keys must not stop another run's identical ids, and deleting the run empties both."""
    monkeypatch.setattr(services, "KEY_MERGE_BLOCKS", 2)
    owner = get_user_model().objects.create_user("k")
    run, other = Run.objects.create(owner=owner, name="r"), Run.objects.create(owner=owner, name="o")
    batches = [b"\n".join(json.dumps(_event(i)).encode() for i in range(k * 4, k * 4 + 4)) for k in range(5)]
    for body in batches:
        assert services.ingest_ndjson(run, body).stored == 4
    assert EventKey.objects.filter(run=run).exists()
    # (PostgreSQL has one key table; this test also runs there with DATABASE_URL set)
    assert RecentEventKey.objects.filter(run=run).exists() == (connection.vendor == "sqlite")
    for body in batches:  # every batch again: keys now in either table
        again = services.ingest_ndjson(run, body)
        assert (again.stored, again.duplicates) == (0, 4)
    mixed = b"\n".join(json.dumps(_event(i)).encode() for i in (0, 19, 20, 20, 21))  # old, old, new twice, new
    res = services.ingest_ndjson(run, mixed)
    assert (res.stored, res.duplicates) == (2, 3)
    assert services.ingest_ndjson(other, batches[0]).stored == 4  # same ids, another run
    assert services.event_count(run) == 22 and sorted(services.event_ids(run)) == sorted(
        f"x{i}" for i in range(22)
    )
    keys = EventKey.objects.filter(run=run).count() + RecentEventKey.objects.filter(run=run).count()
    assert keys == 22
    run.delete()
    assert not EventKey.objects.filter(run_id=run.pk).exists()
    assert not RecentEventKey.objects.filter(run_id=run.pk).exists()
