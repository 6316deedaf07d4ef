"""Every message the live fabric WebSocket carries, declared in one place.

Text frames are JSON (``type`` names the message); data travels in binary frames so an update
costs about one byte per port. Binary layout (little-endian)::

    COLUMN  u8 kind=1 | u8 metric_id | u16 reserved | u32 seq | u32 n_ports | f64 ts_ms | n_ports x u8
    WINDOW  u8 kind=2 | u8 metric_id | u16 reserved | u32 seq | u32 n_ports | u32 n_cols | 2 x u32 pad
            | n_cols x f64 ts_ms | n_cols x n_ports x u8 (column after column, oldest first)

``reserved`` carries flags: ``FLAG_LAST`` marks the last WINDOW message of a window. A window is
sent as several WINDOW messages of at most ``WINDOW_CHUNK_BYTES`` (Daphne refuses WebSocket
messages over 1 MiB; 600 columns x 16,384 ports is 9.8 MB), oldest columns first; the browser
draws it when the last one arrives.

A u8 is a quantised value on the metric's scale (``Scale`` in the hello); ``255`` means *no data*
(failed poll, stale switch) and is drawn as such, never as zero. ``frontend/static/live/protocol.js``
mirrors these constants and the close codes of ``fabricmon.base.sockets``;
``tests/live/test_wire.py::test_protocol_js_mirrors_python_constants`` keeps them in step.

A selected run's phase markers travel as text beside the columns: the browser sends
``{"type": "markers", "run": id}`` (``null``: none) and the server answers with a ``markers``
message holding every marker of the window (``reset: true``), then only new or moved markers and
clock-gate changes (``fabricmon.phases.markers.MarkerFeed``). ``runs/<id>/markers.json`` stays
for scripts.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

PROTOCOL_VERSION = 1
NO_DATA = 255
CODE_MAX = 254  # highest code that carries a value

KIND_COLUMN = 1
KIND_WINDOW = 2
FLAG_LAST = 1
WINDOW_CHUNK_BYTES = 512 * 1024
COLUMN_HEADER_BYTES = 20
WINDOW_HEADER_BYTES = 24


class Scale(TypedDict):
    """How a u8 code maps back to a value: linear ``lo + code/254·(hi-lo)`` or log10 between lo and hi
    (code 0 = at or below ``lo``, including zero)."""

    kind: Literal["linear", "log"]
    lo: float
    hi: float
    unit: str


# --- server → client (text) -----------------------------------------------------------------
class Hello(TypedDict):
    """Sent on connect and after every ``subscribe``: what the following binary frames mean."""

    type: Literal["hello"]
    protocol: int
    fabric: str
    metric: str
    metric_id: int
    metrics: list[str]  # metrics the latest frame carries (the selector offers only these)
    scale: Scale
    scale_kinds: list[str]  # the scales this metric may be asked in (bit rates: linear, log)
    n_ports: int
    topology_version: str
    interval_s: float
    window_cols: int
    max_in_flight: int


class ErrorMessage(TypedDict):
    type: Literal["error"]
    message: str


# --- client → server (text) -----------------------------------------------------------------
class Ack(TypedDict):
    """The browser has drawn binary message ``seq``; the server keeps at most ``max_in_flight``
    unacknowledged, so a slow client gets the newest frame and older ones are dropped."""

    type: Literal["ack"]
    seq: int


class Subscribe(TypedDict, total=False):
    """Switch metric (and, for bit rates, ``scale``: linear | log); the server answers with a new
    ``hello`` and ``WINDOW``."""

    type: Literal["subscribe"]
    metric: str
    scale: str


class SelectRun(TypedDict):
    """Draw this run's phase markers (``None``: none); answered with ``markers`` messages."""

    type: Literal["markers"]
    run: int | None


class Markers(TypedDict):
    """A run's phase markers for the time axis: all of the window on ``reset``, else only new or
    moved ones. ``gate`` is the clock-alignment gate (against the poll interval), ``counters`` the
    phase views' ``counters_of_run`` gate (None: no counters judged yet); ``verdict`` is the worse
    of the two and ``reason`` names every gate that did not pass."""

    type: Literal["markers"]
    run: int
    name: str
    state: str
    verdict: str
    reason: str
    clock: dict[str, Any] | None
    gate: dict[str, Any] | None
    counters: dict[str, Any] | None
    cursor_ns: int
    markers: list[dict[str, Any]]  # {step, layer, phase, start_ms, end_ms}
    reset: bool


class Incidents(TypedDict):
    """The fabric's open incast episodes for the heatmap overlay, sent on connect and on change
    (``fabricmon.live.incidents``): per episode its firing kinds, migrations, culprit line, link,
    and trajectory steps inside the window ``{ts_ms, ports (heatmap positions), names, leaf_jump}``."""

    type: Literal["incidents"]
    fabric: str
    episodes: list[dict[str, Any]]


ServerText = Hello | Markers | Incidents | ErrorMessage
ClientText = Ack | Subscribe | SelectRun
