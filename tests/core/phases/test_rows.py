"""Which ports a phase view sends as rows (core.phases.rows): every port of a fabric up to the
bound, else each column's hot port in every view drawn, then the busiest — never a withheld view's."""

from __future__ import annotations

import numpy as np

from fabricmon.core.phases.assess import SourceView
from fabricmon.core.phases.attribution import HotPorts
from fabricmon.core.phases.rows import shown_ports

COLS = ((0, 0, "dispatch"), (0, 0, "combine"), (1, 0, "dispatch"))


def view(load: np.ndarray, verdict: str = "show", hot: HotPorts | None = None) -> SourceView:
    return SourceView("projected", verdict, (), COLS, load, hot=hot)  # type: ignore[arg-type]


def test_up_to_the_bound_every_port_is_a_row() -> None:
    load = np.arange(30, dtype=float).reshape(3, 10)
    assert shown_ports([view(load)], 10, 10).tolist() == list(range(10))
    assert shown_ports([], 10, 12).tolist() == list(range(10))


def test_above_it_the_hot_ports_then_the_busiest_in_port_order() -> None:
    n = 100
    load = np.ones((3, n))
    load[0, 70], load[1, 5], load[2, 90] = 50.0, 40.0, 30.0  # each column's hot port
    load[:, 33] = 20.0  # busy in every column, never the hottest
    load[1, 12] = np.nan  # no data is not busy
    attributed = np.ones((3, n))
    attributed[:, 61] = 9.0
    hot = HotPorts(keys=COLS, port=np.array([61, 61, 61]), runner_up=np.array([2, 2, 2]),
                   lead_rel=np.zeros(3), lead_se_rel=np.zeros(3), claimed=np.ones(3, bool),
                   tied=np.zeros((3, n), bool), z=2.0)
    withheld = np.zeros((3, n))
    withheld[:, 44] = 1e9  # a withheld view's ports earn no rows
    rows = shown_ports([view(load), view(attributed, hot=hot), view(withheld, "withhold")], n, 6).tolist()
    assert rows == [2, 5, 33, 61, 70, 90]
    # more hot ports than rows: the busiest of them
    assert shown_ports([view(load)], n, 2).tolist() == [5, 70]


def test_a_view_without_data_in_a_column_names_no_hot_port_for_it() -> None:
    load = np.full((3, 50), np.nan)
    load[0, 7] = 3.0
    assert shown_ports([view(load)], 50, 1).tolist() == [7]
