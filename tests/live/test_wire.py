"""Pure units: quantisation, binary messages, layout groups and peers."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest

from fabricmon.base import sockets
from fabricmon.core.telemetry.frames import Frame
from fabricmon.core.topology.heatmap_rows import fabric_layout
from fabricmon.live import messages, wire
from tests.topologies import two_leaf_two_spine


def make_frame(values: dict[str, list[float]], ts_ns: int = 1_700_000_000_000_000_000) -> Frame:
    return Frame("f", "v1", ts_ns, 1.0, {k: np.asarray(v, dtype=np.float32) for k, v in values.items()})


def test_no_data_is_never_zero() -> None:
    codes = wire.quantise([np.nan, 0.0, 0.5, 1.0, 7.0, -1.0], wire.scale_of("util"))
    assert codes.tolist() == [255, 0, 127, 254, 254, 0]


@pytest.mark.parametrize("metric", ["in_bps", "out_bps", "ecn_marked_ps", "watermark_bytes", "util"])
def test_round_trip_within_one_step(metric: str) -> None:
    scale = wire.scale_of(metric)
    lo, hi = scale["lo"], scale["hi"]
    values = np.geomspace(lo, hi, 500) if scale["kind"] == "log" else np.linspace(lo, hi, 500)
    back = wire.dequantise(wire.quantise(values, scale), scale)
    if scale["kind"] == "log":
        step = (hi / lo) ** (1 / messages.CODE_MAX)
        assert np.all(back / values <= step**0.5 * 1.0001) and np.all(values / back <= step**0.5 * 1.0001)
    else:
        assert np.max(np.abs(back - values)) <= (hi - lo) / messages.CODE_MAX / 2 + 1e-9


def test_order_preserved_so_the_hottest_port_stays_hottest() -> None:
    rng = np.random.default_rng(1)
    values = rng.uniform(0, 0.2, 1000)
    values[417] = 0.9
    codes = wire.quantise(values, wire.scale_of("util"))
    assert int(np.argmax(codes)) == 417


def test_column_is_about_one_byte_per_port() -> None:
    n = 4096
    frame = make_frame({"util": [0.25] * n})
    blob = wire.encode_column(frame, "util", seq=7, n_ports=n)
    assert len(blob) == messages.COLUMN_HEADER_BYTES + n
    kind, metric_id, seq, ts_ms, codes = wire.decode_message(blob)
    assert (kind, metric_id, seq) == (messages.KIND_COLUMN, wire.METRIC_IDS["util"], 7)
    assert ts_ms[0] == frame.ts_ns / 1e6
    assert codes.shape == (1, n) and set(codes.ravel().tolist()) == {round(0.25 * 254)}


def test_missing_metric_or_wrong_port_count_draws_no_data() -> None:
    frame = make_frame({"util": [0.5, 0.5]})
    assert wire.frame_column(frame, "ecn_marked_ps", 2).tolist() == [255, 255]
    assert wire.frame_column(frame, "util", 3).tolist() == [255, 255, 255]


def test_window_message_layout() -> None:
    frames = [make_frame({"util": [i / 10, np.nan, 1.0]}, ts_ns=(1 + i) * 10**9) for i in range(4)]
    [blob] = wire.encode_window(frames, "util", first_seq=1, n_ports=3)
    assert wire.message_flags(blob) == messages.FLAG_LAST
    kind, _, seq, ts_ms, codes = wire.decode_message(blob)
    assert kind == messages.KIND_WINDOW and seq == 1
    assert ts_ms.tolist() == [1000.0, 2000.0, 3000.0, 4000.0]
    assert codes[:, 1].tolist() == [255] * 4 and codes[:, 2].tolist() == [254] * 4
    assert codes[:, 0].tolist() == [0, 25, 51, 76]


def test_big_windows_are_chunked_under_daphnes_message_limit() -> None:
    n = 16_384
    frames = [make_frame({"util": np.full(n, i / 600)}, ts_ns=(1 + i) * 10**9) for i in range(600)]
    blobs = wire.encode_window(frames, "util", first_seq=5, n_ports=n)
    assert all(len(b) <= messages.WINDOW_CHUNK_BYTES + messages.WINDOW_HEADER_BYTES for b in blobs)
    assert [wire.message_flags(b) for b in blobs] == [0] * (len(blobs) - 1) + [messages.FLAG_LAST]
    decoded = [wire.decode_message(b) for b in blobs]
    assert [d[2] for d in decoded] == list(range(5, 5 + len(blobs)))
    ts = np.concatenate([d[3] for d in decoded])
    assert ts.tolist() == [(1 + i) * 1000.0 for i in range(600)]
    codes = np.concatenate([d[4] for d in decoded])
    assert codes.shape == (600, n) and codes[599, 0] == round(599 / 600 * 254)
    [empty] = wire.encode_window([], "util", first_seq=1, n_ports=n)
    assert wire.decode_message(empty)[4].shape == (0, n)


def test_unknown_metric_is_named() -> None:
    with pytest.raises(KeyError, match="bogus"):
        wire.scale_of("bogus")


def test_protocol_js_mirrors_python_constants() -> None:
    js = (Path(__file__).parents[2] / "frontend/static/live/protocol.js").read_text()
    consts = dict(re.findall(r"export const (\w+) = (\d+);", js))
    for name in ("NO_DATA", "CODE_MAX", "KIND_COLUMN", "KIND_WINDOW", "COLUMN_HEADER_BYTES",
                 "WINDOW_HEADER_BYTES", "FLAG_LAST"):
        assert int(consts[name]) == getattr(messages, name), name
    for name in ("CLOSE_UNAUTHENTICATED", "CLOSE_FORBIDDEN", "CLOSE_TOO_SLOW", "CLOSE_NO_SUCH_RUN",
                 "CLOSE_SERVER_ERROR"):
        assert int(consts[name]) == getattr(sockets, name), name


def test_layout_groups_cover_every_port_in_order() -> None:
    spec = two_leaf_two_spine("g", servers=4)
    layout = fabric_layout(spec, [f"p{i}" for i in range(24)])
    n = layout["n_ports"]
    for level in (0, 1):
        spans = [(g["start"], g["end"]) for g in layout["groups"] if g["level"] == level]
        assert spans[0][0] == 0 and spans[-1][1] == n
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    labels0 = [g["label"] for g in layout["groups"] if g["level"] == 0]
    assert labels0 == ["rail 0", "rail 1", "spines"]
    assert layout["ports"]["peer"][3] == "p3"
    with pytest.raises(ValueError, match="peer labels"):
        fabric_layout(spec, ["x"])
