"""Columnar event storage: the fast batch parser agrees with the careful validator line by line,
stored blocks read back as the same events, and matrices add up across batches."""

from __future__ import annotations

import json
from dataclasses import fields

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError

from fabricmon.jobs import blocks, ingest, matrices
from fabricmon.jobs.columns import (
    EventColumns,
    columns_from_rows,
    decode_block,
    encode_block,
    id_hashes,
    id_keys,
)
from fabricmon.jobs.models import EventBlock, EventBlockKey, EventIdSet, Run, TrafficMatrix
from fabricmon.jobs.ndjson import parse_ndjson_columns
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
        got, want = decode_block(*encode_block(cols.take(order[0]))), expected.take(order[1])
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


def _line(i: int, send: str, recv: str = "null", **over) -> bytes:
    """One event line with per-peer maps given as raw JSON text (repeated keys are expressible)."""
    e = {**_event(i), **over}
    e.pop("send_bytes_per_peer"), e.pop("recv_bytes_per_peer")
    head = json.dumps(e, separators=(",", ":"))[:-1]
    return f'{head},"send_bytes_per_peer":{send},"recv_bytes_per_peer":{recv}}}'.encode()


def _assert_same_columns(body: bytes) -> None:
    cols, errors, lines = parse_ndjson_columns(body, clock_offset_ns=3)
    old = parse_ndjson(body, clock_offset_ns=3)
    assert lines == old.lines
    assert [e.as_dict() for e in errors] == [e.as_dict() for e in old.errors]
    want = columns_from_rows(old.rows, old.peers)
    got = cols.take(np.argsort(np.array(cols.event_id), kind="stable"))
    want = want.take(np.argsort(np.array(want.event_id), kind="stable"))
    for f in fields(EventColumns):
        assert np.array_equal(np.asarray(getattr(got, f.name)), np.asarray(getattr(want, f.name))), f.name


PEER_MAPS = [
    '{"0":1,"1":2,"2":3}',
    '{"1":5,"1":6}',  # a repeated key: JSON keeps the last value
    '{"2":1,"0":4,"1":9}',  # not in rank order
    '{"2":1,"0":4,"2":9}',  # repeated, not adjacent
    '{"":5}',  # an empty key is no rank
    '{"007":5,"7":1}',  # leading zeros: two keys, one rank
    '{"1":1000000000000000000,"2":9223372036854775807}',  # large but int64
    '{"1":9223372036854775808}',  # beyond int64
    '{"99999999999999999999":1}',  # rank beyond int64
    '{"9223372036854775807":1}',  # the largest int64 rank
    '{"\\u00b2":1}',  # "²": str.isdigit says yes, int() says no
    '{"\\u0663":1}',  # Arabic-Indic three: a digit, but not an ASCII one
    '{"1":{"2":3}}',
    '{"1":"2"}',
    '{"1":2.5}',
    '{"1":2e3}',
    "{}",
    "null",
    "[]",
    '{"0": 1, "1": 2}',  # json.dumps spacing
    '{ "0":1 }',
    "{" + ",".join(f'"{d}":{d + 1}' for d in range(1500)) + "}",  # more entries than the skeleton table
    "{" + ",".join(f'"{d}":999999999999999999' for d in range(10)) + "}",  # each fits, the sum does not
]


def test_fast_parser_reads_peer_maps_like_the_careful_validator() -> None:
    """Every peer-map shape, alone in a batch, mixed with plain lines, and as the receive map."""
    plain = '{"0":1,"1":2,"2":3}'
    for n, text in enumerate(PEER_MAPS):
        total = None
        _assert_same_columns(_line(n, text))
        _assert_same_columns(_line(n, plain, text))
        _assert_same_columns(b"\n".join([_line(100, plain), _line(n, text, text), _line(101, plain, plain)]))
        if text.startswith("{") and '""' not in text and "{" not in text[1:]:
            total = 12  # a given total that disagrees with most sums
        _assert_same_columns(_line(n, text, bytes_sent=total))
    everything = b"\n".join(_line(i, t, PEER_MAPS[-1 - i]) for i, t in enumerate(PEER_MAPS))
    _assert_same_columns(everything)


def _list_line(i: int, send: str, recv: str = "null", pg: str = "[4,0,2]", **over) -> bytes:
    """One event line with per-pg-rank lists and pg_ranks given as raw JSON text."""
    e = {**_event(i), **over}
    for key in ("send_bytes_per_peer", "recv_bytes_per_peer", "pg_ranks"):
        e.pop(key)
    head = json.dumps(e, separators=(",", ":"))[:-1]
    return f'{head},"pg_ranks":{pg},"send_bytes_per_pg_rank":{send},"recv_bytes_per_pg_rank":{recv}}}'.encode()


LISTS = [  # (a per-pg-rank list, the pg_ranks it is for)
    ("[1,2,3]", "[4,0,2]"),
    ("[1, 2, 3]", "[4, 0, 2]"),  # json.dumps spacing
    ("[0,0,0]", "[4,0,2]"),
    ("[]", "[]"),
    ("[1,2]", "[4,0,2]"),  # one short
    ("[1,2,3,4]", "[4,0,2]"),  # one long
    ("[1,2,3]", "[4,4,2]"),  # a rank twice: whose is which?
    ("[1,2,3]", "null"),  # no pg_ranks
    ("[1,2,3]", '[4,"0",2]'),
    ("[1,2,3]", "[4,0,-2]"),
    ("[1,2,3]", "[4,0,99999]"),  # beyond the run's ranks (max_rank in the tests that set it)
    ("[1,-2,3]", "[4,0,2]"),
    ("[1,2.5,3]", "[4,0,2]"),
    ("[1,2e3,3]", "[4,0,2]"),
    ('[1,"2",3]', "[4,0,2]"),
    ("[1,[2],3]", "[4,0,2]"),
    ("[[],[],[]]", "[4,0,2]"),
    ('{"4":1}', "[4,0,2]"),
    ('"123"', "[4,0,2]"),
    ("[1,1000000000000000000,9223372036854775807]", "[4,0,2]"),  # large but int64
    ("[1,2,9223372036854775808]", "[4,0,2]"),  # beyond int64
    ("[" + ",".join(["999999999999999999"] * 10) + "]", "[" + ",".join(map(str, range(10))) + "]"),  # sum overflows
    ("[" + ",".join(map(str, range(1500))) + "]", "[" + ",".join(map(str, range(1500, 0, -1))) + "]"),
    ("null", "[4,0,2]"),
]


def test_fast_parser_reads_per_pg_rank_lists_like_the_careful_validator() -> None:
    """Every list shape alone, as the receive list, beside a send map, mixed with map lines."""
    for n, (text, pg) in enumerate(LISTS):
        _assert_same_columns(_list_line(n, text, pg=pg))
        _assert_same_columns(_list_line(n, "[1,2,3]", text, pg=pg))
        _assert_same_columns(b"\n".join([_line(100, '{"0":1}'), _list_line(n, text, text, pg=pg),
                                         _line(101, '{"2":5,"0":1}', '{"1":1}')]))
        _assert_same_columns(_list_line(n, text, pg=pg, bytes_sent=6))
    mixed = [_list_line(i, t, LISTS[-1 - i][0], pg=g) for i, (t, g) in enumerate(LISTS)]
    mixed += [_line(200 + i, t) for i, t in enumerate(PEER_MAPS)]
    _assert_same_columns(b"\n".join(mixed[::2] + mixed[1::2]))
    # a line giving a list and a map for the same direction: which is meant? refused
    both = {**_event(7), "send_bytes_per_pg_rank": [1, 2, 3]}
    cols, errors, _ = parse_ndjson_columns(json.dumps(both).encode())
    assert not len(cols) and errors[0].field == "send_bytes_per_pg_rank" and "not both" in errors[0].reason


def test_a_per_pg_rank_list_stores_what_its_peer_map_stores() -> None:
    maps = [_event(i, pg_ranks=[4, 0, 2], send_bytes_per_peer={"4": i, "0": 2, "2": 3},
                   recv_bytes_per_peer={"4": 5, "0": 0, "2": 7 * i}) for i in range(9)]
    lists = [{**{k: v for k, v in e.items() if not k.endswith("_per_peer")},
              "send_bytes_per_pg_rank": [i, 2, 3], "recv_bytes_per_pg_rank": [5, 0, 7 * i]}
             for i, e in enumerate(maps)]
    a, errors_a, _ = parse_ndjson_columns(b"\n".join(json.dumps(e).encode() for e in maps))
    b, errors_b, _ = parse_ndjson_columns(b"\n".join(json.dumps(e).encode() for e in lists))
    assert not errors_a and not errors_b and len(a) == 9
    for f in fields(EventColumns):
        assert np.array_equal(np.asarray(getattr(a, f.name)), np.asarray(getattr(b, f.name))), f.name
    # an event without an id is named by its content: the same event in either form, the same id
    a, _, _ = parse_ndjson_columns(json.dumps({**maps[3], "id": None}).encode())
    b, _, _ = parse_ndjson_columns(json.dumps({**lists[3], "id": None}).encode())
    assert a.event_id == b.event_id


def test_blocks_read_back_and_matrices_add_across_batches(db) -> None:
    run = Run.objects.create(owner=get_user_model().objects.create_user("c"), name="r")
    events = [_event(i) for i in range(12)]
    for part in (events[:5], events[5:], events[3:8]):  # the last batch is all duplicates
        ingest.ingest_ndjson(run, b"\n".join(json.dumps(e).encode() for e in part))
    assert blocks.event_count(run) == 12 and len(set(id_hashes(blocks.event_ids(run)))) == 12
    back = list(blocks.iter_events(run))
    assert [b["event_id"] for b in back] == [e["id"] for e in events]
    assert back[4]["send_bytes_per_peer"] == events[4]["send_bytes_per_peer"]
    assert back[4]["pg_ranks"] == [0, 1, 2] and back[4]["step"] == 0 and back[4]["bytes_recv"] == 21
    step0 = blocks.event_columns(run, step=0, phase="combine", source="probe")
    assert step0.event_id == [f"x{i}" for i in range(6)]
    m = TrafficMatrix.objects.get(run=run, step=0, layer=0, phase="combine")
    want = np.zeros((3, 3), dtype=np.int64)
    for e in events[:6]:
        for d, b in e["send_bytes_per_peer"].items():
            want[e["rank"], int(d)] += b
    assert np.array_equal(m.sent_array(), want) and m.calls == 6


@pytest.mark.parametrize("dense_cells", [matrices.DENSE_MATRIX_CELLS, 0])
def test_matrices_equal_a_python_sum_whichever_way_they_are_added(db, monkeypatch, dense_cells) -> None:
    """Both ways of summing a batch (one dense array, or per matrix from one sort) give the sum a
    plain loop gives, for new matrices and ones that grow (a later batch has more ranks)."""
    monkeypatch.setattr(matrices, "DENSE_MATRIX_CELLS", dense_cells)
    run = Run.objects.create(owner=get_user_model().objects.create_user("d"), name="r")
    rng = np.random.default_rng(7)
    events = []
    for i in range(300):
        ranks = 3 if i < 150 else 6  # the second half widens some matrices
        peers = {str(d): int(rng.integers(0, 1000)) for d in rng.choice(ranks, 3, replace=False)}
        events.append(
            _event(
                i,
                rank=i % ranks,
                step=i // 40,
                layer=i % 2,
                send_bytes_per_peer=peers,
                recv_bytes_per_peer=None,
            )
        )
    for k in range(0, 300, 70):
        ingest.ingest_ndjson(run, b"\n".join(json.dumps(e).encode() for e in events[k : k + 70]))
    want: dict[tuple[int, int], np.ndarray] = {}
    for e in events:
        m = want.setdefault((e["step"], e["layer"]), np.zeros((6, 6), dtype=np.int64))
        for d, b in e["send_bytes_per_peer"].items():
            m[e["rank"], int(d)] += b
    rows = TrafficMatrix.objects.filter(run=run, phase="combine", source="probe")
    assert rows.count() == len(want)
    for row in rows:
        got = np.zeros((6, 6), dtype=np.int64)
        got[: row.n_ranks, : row.n_ranks] = row.sent_array()
        assert np.array_equal(got, want[(row.step, row.layer)]), (row.step, row.layer)
        assert not row.received_array().any()


def test_id_hash_does_not_depend_on_the_batch() -> None:
    alone = id_hashes(["x7"])[0]
    assert id_hashes(["a-much-longer-event-id", "x7"])[1] == alone
    assert len(set(id_hashes(["x7", "x7\x00", "x70", "7x", "é7"]).tolist())) == 5


def test_id_keys_share_a_row_per_64_sequence_numbers() -> None:
    """An id's trailing number picks its bit; its prefix and the number's block of 64 its row.
    "b01" is not "b1" (a leading zero: the whole id is the key), and 19 digits are no number."""
    ids = ["b0", "b1", "b63", "b64", "b01", "b1", "c1", "0", "1", "00", "x", "b" + "9" * 18, "b" + "9" * 19]
    keys, bits = id_keys(ids)
    assert keys[0] == keys[1] == keys[2] == keys[5] and len({keys[0], keys[3], keys[4], keys[6]}) == 4
    assert bits.tolist()[:4] == [0, 1, 63, 0] and bits[4] == 0 and bits[11] == (10**18 - 1) % 64
    assert keys[7] == keys[8] and bits[7] != bits[8] and keys[9] != keys[7] and bits[12] == 0
    assert (id_keys(["a-much-longer-event-id", "b1"])[0][1], id_keys(["b1"])[0][0]) == (keys[1], keys[1])
    rng = np.random.default_rng(3)
    many = list({f"p{a}-{b}" for a, b in rng.integers(0, 10**6, size=(50_000, 2)).tolist()})
    many += ["p1-007", "p1-7", "p1-", "é7", "7é", "x7\x00"]
    k, b = id_keys(many)
    assert len(set(zip(k.tolist(), b.tolist(), strict=True))) == len(many)  # distinct ids: distinct bits
    # an id's key is its own, whatever its batch holds (ASCII ids are hashed by their bytes, others
    # by their UTF-32 code units: a batch of both takes both ways)
    for i in (0, 7, len(many) - 4, len(many) - 2, len(many) - 1):
        assert id_keys([many[i]])[0][0] == k[i] and id_keys([many[i]])[1][0] == b[i], many[i]


def test_duplicates_are_found_across_batches_and_key_rows(db) -> None:
    """A re-post is caught whichever batch claimed its ids (their 64-id rows are shared across
    batches), a run's ids do not stop another run's identical ids, ids without a sequence number
    work the same, and deleting the run deletes its rows."""
    owner = get_user_model().objects.create_user("k")
    run, other = Run.objects.create(owner=owner, name="r"), Run.objects.create(owner=owner, name="o")
    batches = [b"\n".join(json.dumps(_event(i)).encode() for i in range(k * 40, k * 40 + 40)) for k in range(5)]
    for body in batches:
        assert ingest.ingest_ndjson(run, body).stored == 40
    assert EventIdSet.objects.filter(run=run).count() == 4  # x0…x199: 4 blocks of 64 numbers
    for body in batches:
        again = ingest.ingest_ndjson(run, body)
        assert (again.stored, again.duplicates) == (0, 40)
    mixed = b"\n".join(
        json.dumps(_event(i)).encode() for i in (0, 199, 200, 200, 201)
    )  # old, old, new twice, new
    res = ingest.ingest_ndjson(run, mixed)
    assert (res.stored, res.duplicates) == (2, 3)
    unnumbered = b"\n".join(json.dumps(_event(0) | {"id": i}).encode() for i in ("u-a", "u-b", "x01", "u-a"))
    assert ingest.ingest_ndjson(run, unnumbered).stored == 3
    assert ingest.ingest_ndjson(run, unnumbered).duplicates == 4
    assert ingest.ingest_ndjson(other, batches[0]).stored == 40  # same ids, another run
    assert blocks.event_count(run) == 205 and sorted(blocks.event_ids(run)) == sorted(
        [f"x{i}" for i in range(202)] + ["u-a", "u-b", "x01"]
    )
    run_id = run.pk
    run.delete()
    assert not EventIdSet.objects.filter(run_id=run_id).exists()
    # no database foreign keys on blocks, their key index or matrices: the ORM's cascade empties them
    for model in (EventBlock, EventBlockKey, TrafficMatrix):
        assert not model.objects.filter(run_id=run_id).exists(), model
    assert blocks.event_count(other) == 40 and TrafficMatrix.objects.filter(run=other).exists()


def test_ids_of_a_row_each_are_claimed_like_numbered_ones(db) -> None:
    """UUID-like ids are a claim row each; on PostgreSQL a batch of many is inserted plainly
    first, and a taken one (a re-post, part of the batch) falls back to the upsert."""
    run = Run.objects.create(owner=get_user_model().objects.create_user("u"), name="u")
    ids = [f"{i:032x}ab" for i in range(300)]

    def post(part: list[str]) -> tuple[int, int]:
        body = b"\n".join(json.dumps(_event(0) | {"id": i}).encode() for i in part)
        res = ingest.ingest_ndjson(run, body)
        return res.stored, res.duplicates

    assert post(ids[:150]) == (150, 0)
    assert post(ids[:150]) == (0, 150)
    assert post(ids[100:300]) == (150, 50)
    assert post([*ids[:10], "x64", "x65", *ids[:10]]) == (2, 20)
    assert EventIdSet.objects.filter(run=run).count() == 301 and blocks.event_count(run) == 302


def test_a_batch_for_a_deleted_run_stores_nothing(db) -> None:
    """Blocks and matrices have no database foreign key to their run: ingest checks the run row
    once per batch, so events of a run deleted meanwhile are refused, not left orphaned."""
    run = Run.objects.create(owner=get_user_model().objects.create_user("gone"), name="r")
    body = b"\n".join(json.dumps(_event(i)).encode() for i in range(4))
    Run.objects.filter(pk=run.pk).delete()
    with pytest.raises(IntegrityError, match="does not exist"):
        ingest.ingest_ndjson(run, body)
    for model in (EventBlock, EventBlockKey, TrafficMatrix, EventIdSet):
        assert not model.objects.filter(run_id=run.pk).exists(), model


def test_importer_validation_names_bad_peer_keys() -> None:
    """The row-by-row validator (importers) refuses non-ASCII digits and out-of-range ranks with a
    reason instead of failing on int()."""
    from fabricmon.jobs.validation import validate_dicts

    bad = [{"\u00b2": 1}, {"\u0663": 1}, {"99999999999999999999": 1}, {"1": 2**63}]
    batch = validate_dicts([_event(i, send_bytes_per_peer=m) for i, m in enumerate(bad)] + [_event(9)])
    assert len(batch.rows) == 1 and batch.rows[0][0] == "x9"
    assert [(e.line, e.field) for e in batch.errors] == [(n, "send_bytes_per_peer") for n in range(1, 5)]


def test_plain_batches_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of plain lines (compact or json.dumps spacing) is read by the columnar parser alone:
    no line reaches the careful validator. (Its per-peer number reader once saw the blanks its
    translate table made from quotes and braces, sent every map to the careful path and made
    ingest ~4x slower with every answer still right — only this test notices.)"""
    from fabricmon.jobs import ndjson

    def careful(*args: object) -> None:
        raise AssertionError("a plain line reached the careful validator")

    monkeypatch.setattr(ndjson, "validate_event", careful)
    for dumps in (lambda e: json.dumps(e).encode(), lambda e: json.dumps(e, separators=(",", ":")).encode()):
        body = b"\n".join(dumps(_event(i)) for i in range(50))
        cols, errors, lines = parse_ndjson_columns(body, clock_offset_ns=0, max_rank=3)
        assert (len(cols), errors, lines) == (50, [], 50)
        assert cols.send_bytes.tolist()[:3] == [0, 1, 2] and cols.send_n.tolist() == [3] * 50


def test_a_batch_decoded_as_one_array_keeps_its_lines_apart() -> None:
    """The fast path decodes a batch's lines as one JSON array; a line that would read as two
    elements ("{…},{…}"), a blank line, a bracket or a trailing newline must still count lines
    as the line-by-line reading does, and name the bad line."""
    good = [json.dumps(_event(i)).encode() for i in range(4)]
    cases = {
        b"\n".join(good) + b"\n": (4, [], 5),
        b"\n".join([good[0], good[1] + b"," + good[2], good[3]]): (2, [2], 3),
        b"\n".join([good[0], b"", good[1]]): (2, [], 3),
        b"\n".join([good[0], b"]", good[1], b"[" + good[2]]): (2, [2, 4], 4),
        b"\n".join([good[0], good[1] + b"]"]): (1, [2], 2),
        b"": (0, [], 1),
    }
    for body, (stored, bad_lines, lines) in cases.items():
        cols, errors, n = parse_ndjson_columns(body, clock_offset_ns=0, max_rank=3)
        assert (len(cols), [e.line for e in errors], n) == (stored, bad_lines, lines), body
