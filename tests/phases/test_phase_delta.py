"""The phase socket's diffs and splits, as pure functions over views (no server): a delta names
only new or changed columns, a verdict flip replaces the view, a withheld view never carries
values, and a message over the budget splits into parts that merge back to the original."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricmon.core.phases.assess import SourceView
from fabricmon.core.phases.gates import Gate
from fabricmon.core.phases.timeline import grouped_median
from fabricmon.phases.deltas import split_message, view_delta, view_message

PASS = Gate(
    "rank_map_coverage", "a", 1.0, "ratio", 0.99, 0.9, True, "pass", "rank_map_coverage: 100 % ≥ 99 %"
)
FAIL = Gate(
    "rank_map_coverage", "a", 0.5, "ratio", 0.99, 0.9, True, "withhold", "rank_map_coverage: 50 % < 90 % — a"
)


def view(cols: list[tuple[int, int, str]], values: np.ndarray | None, gate: Gate = PASS) -> SourceView:
    verdict = "withhold" if gate.verdict == "withhold" else "show"
    return SourceView("projected", verdict, (gate,), tuple(cols), None if verdict == "withhold" else values)  # type: ignore[arg-type]


COLS = [(0, 0, "dispatch"), (0, 0, "combine"), (1, 0, "dispatch")]
VALS = np.array([[1.0, 9.0, 3.0], [5.0, 1.0, 0.0], [2.0, 2.0, 7.0]])


def test_unchanged_view_has_no_delta_and_new_or_grown_columns_are_upserted() -> None:
    old = view(COLS, VALS)
    assert view_delta(old, view(COLS, VALS.copy())) is None
    grown = VALS.copy()
    grown[1, 2] = 40.0  # a late rank grew (0, 0, combine)
    new = view([*COLS, (1, 0, "combine")], np.vstack([grown, [[0.0, 1.0, 0.0]]]))
    d = view_delta(old, new)
    assert d is not None and d["mode"] == "upsert"
    assert d["columns"] == [[0, 0, "combine"], [1, 0, "combine"]]
    assert d["values"] == [[5, 1, 40], [0, 1, 0]] and d["hot_port"] == [2, 1]


def test_a_flip_to_withhold_replaces_the_view_without_values_and_back_sends_everything() -> None:
    shown, withheld = view(COLS, VALS), view(COLS, VALS, FAIL)
    d = view_delta(shown, withheld)
    assert d is not None and d["mode"] == "full" and d["values"] is None and d["hot_port"] is None
    assert d["verdict"] == "withhold" and d["failed"] == [FAIL.reason]
    assert view_delta(withheld, view(COLS, VALS, FAIL)) is None  # still withheld, same reasons
    back = view_delta(withheld, shown)
    assert back is not None and back["mode"] == "full" and back["values"] == VALS.astype(int).tolist()


def test_a_column_that_left_the_window_is_named_not_the_view_resent() -> None:
    d = view_delta(view(COLS, VALS), view(COLS[1:], VALS[1:]))
    assert d is not None and d["mode"] == "upsert" and d["columns"] == []
    assert d["drop"] == [list(COLS[0])]


def test_rows_carry_only_the_ports_sent_and_a_change_of_rows_resends_every_view_whole() -> None:
    """A fabric larger than FABRICMON_PHASE_MAX_PORTS sends some ports as rows (meta.shown_ports);
    values follow them, hot ports stay named by position; new rows → every view whole, new labels."""
    from fabricmon.phases.deltas import delta_message, snapshot_message
    from fabricmon.phases.state import PXN, PhaseSnapshot

    labels = [{"switch": "leaf", "port": f"Ethernet{p}"} for p in range(3)]

    def snap(rows: list[int], values: np.ndarray) -> PhaseSnapshot:
        return PhaseSnapshot(1, "running", {"run": 1, "ports": labels, "shown_ports": rows},
                             {"projected": view(COLS, values)})

    first = snapshot_message(snap([0, 1], VALS), 1, PXN)
    assert first["meta"]["shown_ports"] == [0, 1] and first["meta"]["ports_total"] == 3
    assert first["meta"]["ports"] == labels[:2]
    assert first["views"]["projected"]["values"] == VALS[:, :2].astype(int).tolist()
    assert first["views"]["projected"]["hot_port"] == [1, 0, 2]  # by position: port 2 is not a row
    grown = VALS.copy()
    grown[0, 0] = 4.0  # changed on a row sent: an upsert of that column, over the rows
    d = delta_message(snap([0, 1], VALS), snap([0, 1], grown), 2)
    assert d is not None and "meta" not in d
    assert d["views"]["projected"]["mode"] == "upsert" and d["views"]["projected"]["values"] == [[4, 9]]
    hidden = VALS.copy()
    hidden[0, 2] = 8.0  # changed only on a port not sent: nothing the client holds
    assert delta_message(snap([0, 1], VALS), snap([0, 1], hidden), 3) is None
    moved = delta_message(snap([0, 1], VALS), snap([1, 2], VALS), 4)
    assert moved is not None and moved["views"]["projected"]["mode"] == "full"
    assert moved["views"]["projected"]["values"] == VALS[:, 1:].astype(int).tolist()
    assert moved["meta"]["shown_ports"] == [1, 2] and moved["meta"]["ports"] == labels[1:]


def test_no_data_travels_as_null_never_as_a_cast_integer() -> None:
    vals = VALS.astype(float).copy()
    vals[1, :] = np.nan  # a phase outside the counters' span
    vals[2, 0] = np.nan  # one port without data
    msg = view_message(view(COLS, vals))
    assert msg["values"][1] == [None] * vals.shape[1] and msg["hot_port"][1] is None
    assert msg["values"][2][0] is None and all(isinstance(v, int) for v in msg["values"][2][1:])
    assert min(v for row in msg["values"] for v in row if v is not None) >= 0
    json.dumps(msg, allow_nan=False)  # valid JSON: no NaN
    assert view_delta(view(COLS, vals), view(COLS, vals.copy())) is None  # no data = no data: unchanged


PER_COLUMN = ("columns", "values", "hot_port", "hot_claim")


def merge(parts: list[dict]) -> dict:  # type: ignore[type-arg]
    """What the browser does with a split message: the first part, then each part's upserts."""
    views = {
        k: {**v, **{c: list(v[c]) for c in PER_COLUMN if v.get(c) is not None}}
        for k, v in parts[0]["views"].items()
    }
    for part in parts[1:]:
        assert part["type"] == "more"
        for k, v in part["views"].items():
            assert v["mode"] == "upsert"
            for c in PER_COLUMN:
                if v.get(c) is not None:
                    views[k][c] += v[c]
    return views


def test_a_big_message_splits_under_the_budget_and_merges_back() -> None:
    rng = np.random.default_rng(3)
    cols = [(s, lay, p) for s in range(40) for lay in range(4) for p in ("dispatch", "combine")]
    attributed = view_message(view(cols, rng.integers(0, 10**9, (len(cols), 64)).astype(float)))
    claims = [{"port": i % 3 or None, "tied": [1, 2]} for i in range(len(cols))]
    attributed |= {"source": "attributed", "hot_claim": claims}  # type: ignore[typeddict-item]
    projected = view_message(view(cols, rng.integers(0, 10**9, (len(cols), 64)).astype(float)))
    msg = {"type": "snapshot", "seq": 1, "views": {"projected": projected, "attributed": attributed}}
    parts = split_message(msg, budget=20_000)
    assert len(parts) > 5 and [p["last"] for p in parts] == [False] * (len(parts) - 1) + [True]
    assert all(len(json.dumps(p, separators=(",", ":"))) <= 20_000 + 2_000 for p in parts)
    assert merge(parts) == msg["views"]
    small = split_message({"type": "delta", "seq": 2, "views": {}})
    assert small == [{"type": "delta", "seq": 2, "views": {}, "last": True}]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(-(10**12), 10**12)), min_size=1, max_size=200))
def test_grouped_median_is_numpys_median_per_group(rows: list[tuple[int, int]]) -> None:
    ids = sorted({g for g, _ in rows})
    group = np.array([ids.index(g) for g, _ in rows], dtype=np.int64)
    values = np.array([v for _, v in rows], dtype=np.int64)
    want = [int(np.median(values[group == i])) for i in range(len(ids))]
    assert grouped_median(group, values, len(ids)).tolist() == want


def test_attributed_hot_ports_travel_only_where_claimed_and_a_changed_claim_is_upserted() -> None:
    from fabricmon.core.phases.attribution import HotPorts

    def hot(claimed: list[bool]) -> HotPorts:
        tied = np.array([[True, False, False], [True, True, True], [False, False, True]])
        return HotPorts(
            ((0, "dispatch"), (0, "combine"), (1, "dispatch")),
            np.array([1, 0, 2]),
            np.array([2, 1, 1]),
            np.array([0.6, 0.001, 0.5]),
            np.array([0.05, np.inf, 0.1]),
            np.array(claimed),
            tied,
            2.0,
        )

    cols = [(-1, 0, "dispatch"), (-1, 0, "combine"), (-1, 1, "dispatch")]
    old = SourceView(
        "attributed", "show", (PASS,), tuple(cols), VALS, basis="counters", hot=hot([True, False, True])
    )
    msg = view_message(old)
    assert msg["basis"] == "counters"
    assert [c["port"] for c in msg["hot_claim"]] == [1, None, 2]  # ambiguous: no port claimed
    assert msg["hot_claim"][1]["tied"] == [0, 1, 2] and msg["hot_claim"][1]["lead_se_rel"] is None
    new = SourceView(
        "attributed", "show", (PASS,), tuple(cols), VALS, basis="counters", hot=hot([True, True, True])
    )
    d = view_delta(old, new)
    assert d is not None and d["mode"] == "upsert" and d["columns"] == [[-1, 0, "combine"]]
    assert d["hot_claim"][0]["port"] == 0
    withheld = SourceView(
        "attributed", "withhold", (FAIL,), tuple(cols), None, basis="counters", hot=hot([True] * 3)
    )
    assert view_message(withheld)["hot_claim"] is None and view_message(withheld)["values"] is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**37), st.integers(0, 300), st.integers(0, 12)), min_size=1, max_size=100))
def test_packed_instances_are_numpys_unique_rows(rows: list[tuple[int, int, int]]) -> None:
    from fabricmon.core.phases.timeline import instances

    a = np.array(rows, dtype=np.int64)
    want, want_inv = np.unique(a, axis=0, return_inverse=True)
    got, got_inv = instances(a[:, 0], a[:, 1], a[:, 2])
    assert np.array_equal(got, want) and np.array_equal(got_inv, want_inv.reshape(-1))


def test_a_burst_of_nudges_is_one_recompute_per_min_gap() -> None:
    """Twenty nudges in a burst (a job posting twenty batches), and the ticks, cost no recompute
    before the socket's minimum gap has passed (without it: 41 here, one per nudge and tick). The
    gap is an hour, so the count is not a timing race."""
    import asyncio

    from fabricmon.phases.state import PhaseSnapshot
    from fabricmon.phases.stream import PhaseStream

    computed: list[int] = []

    class Counting(PhaseStream):
        async def _compute(self) -> PhaseSnapshot:
            computed.append(1)
            return PhaseSnapshot(len(computed), "running", {}, {})

    async def scenario() -> int:
        sent: list[dict] = []

        async def send(msg: dict) -> None:
            sent.append(msg)

        stream = Counting(1, send, tick_s=0.01, min_gap_s=3600.0)
        task = asyncio.create_task(stream.follow())
        while not sent:
            await asyncio.sleep(0.01)
        await stream.on_ack(stream.seq)  # the browser has room: only the gap holds a recompute back
        for _ in range(20):
            stream.wake.set()
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # twenty ticks too
        task.cancel()
        return len(computed)

    assert asyncio.run(scenario()) == 1  # the snapshot only
