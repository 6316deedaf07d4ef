"""Every message of a run's phase WebSocket (``/ws/phases/runs/<id>/``), declared in one place.

All text (JSON). On connect — and after every ``subscribe`` — the server sends one ``snapshot``:
the run's three views in full. From then on only ``delta`` messages, each naming what changed
since the previous message *this client acknowledged*, per source view::

    absent                      the view did not change
    {"mode": "full", …}         replace the view (a verdict flipped to or from withhold, a column
                                went away, or the first view of this source)
    {"mode": "upsert", …}       merge ``columns`` by (step, layer, phase) key — new columns and
                                columns whose bytes changed (late ranks grow a matrix) —, remove
                                the ``drop`` columns (they slid out of the step window), and
                                replace ``verdict``/``gates``/``failed``

The views cover a window of the run's newest reported steps (``meta.window``), so a snapshot and
every delta are bounded by the window, never by the run's length: as the job trains, a delta
carries the new step's columns and names the oldest ones to drop. ``null`` in ``values`` is a
port without data (a failed poll, a phase outside the counters' span).

A withheld view never carries values: ``values`` and ``hot_port`` are ``null``, ``failed`` says
which gate failed and by how much, on the wire as in the JSON API. Values are whole bytes per
port (JSON integers); ``hot_port`` is the row index of each column's most loaded port.

Size: Daphne refuses messages over 1 MiB, so a snapshot or delta bigger than 512 KiB is split:
the message itself carries the first columns, ``more`` messages the rest (as ``upsert`` views),
and every part has its own ``seq``; ``last: true`` marks the final part — draw then.

Flow control: at most one unacknowledged delta. While the browser has not acknowledged, changes
accumulate on the server as "everything since the last acknowledged state" and go out as one
delta, so a slow browser costs one pending diff, never a queue.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

PROTOCOL_VERSION = 1


class ViewMessage(TypedDict, total=False):
    """One source view, whole (``full``, and in ``snapshot``) or its changed columns (``upsert``)."""

    mode: Literal["full", "upsert"]
    source: str
    verdict: Literal["show", "flag", "withhold"]
    gates: list[dict[str, Any]]
    failed: list[str]  # the reasons of every gate that did not pass
    columns: list[list[Any]]  # [step, layer, phase]
    values: list[list[int | None]] | None  # per-port bytes per column (None: no data); None when withheld
    hot_port: list[int | None] | None  # the most loaded port of each column (None: no data)
    # attributed view: per column, the hot port only where the counters vouch for it
    # ({"port": int | None (None = ambiguous), "top", "runner_up", "lead_rel", "lead_se_rel",
    # "tied": first ports it cannot be told from, "n_tied"}); None for other views
    hot_claim: list[dict[str, Any]] | None
    basis: str | None  # attributed: "counters" | "counters + projection"
    drop: list[list[Any]]  # upsert: columns [step, layer, phase] to remove (left the window)


class Snapshot(TypedDict):
    type: Literal["snapshot"]
    protocol: int
    seq: int
    run: int
    state: str  # running | finished | failed | cancelled
    routing: str
    error: str | None  # nothing to show yet, and why (then views is empty)
    meta: dict[str, Any]  # fabric, rank_map, clock, ports (row labels)
    views: dict[str, ViewMessage]
    last: bool  # false: ``more`` parts follow


class More(TypedDict):
    """The next part of a split snapshot or delta: more columns of its views, as upserts."""

    type: Literal["more"]
    seq: int
    views: dict[str, ViewMessage]
    last: bool


class Delta(TypedDict, total=False):
    type: Literal["delta"]
    seq: int
    last: bool
    state: str
    error: str | None
    meta: dict[str, Any]  # present only when rank_map/clock/ports changed
    views: dict[str, ViewMessage]


class ErrorMessage(TypedDict):
    type: Literal["error"]
    message: str


# --- client → server ------------------------------------------------------------------------
class Ack(TypedDict):
    """The browser has drawn message ``seq``; the next delta may go out."""

    type: Literal["ack"]
    seq: int


class Subscribe(TypedDict, total=False):
    """Another routing model (``pxn`` | ``ecmp`` | ``spray``, ``seed``): answered with a snapshot."""

    type: Literal["subscribe"]
    routing: str
    seed: int


class Window(TypedDict, total=False):
    """Page to the reported steps of [steps_from, steps_to] (at most 64; ``steps_from`` null: back
    to the newest steps); answered with a snapshot whose ``meta.window`` says which steps it holds."""

    type: Literal["window"]
    steps_from: int | None
    steps_to: int


ServerText = Snapshot | More | Delta | ErrorMessage
ClientText = Ack | Subscribe | Window
