"""``fold_layers`` on a view whose values have ports without data (None in the JSON): the folded
sum of such a port is no data, not a 500 (CI: "unsupported operand type(s) for +: 'float' and
'NoneType'" from views.json)."""

from fabricmon.phases.services import fold_layers


def test_a_port_without_data_in_one_step_has_no_folded_sum() -> None:
    view = {"columns": [[0, 1, "dispatch"], [1, 1, "dispatch"], [0, 1, "combine"]],
            "values": [[1.0, 5.0, 2.0], [3.0, None, 1.0], [4.0, 4.0, None]]}
    out = fold_layers(view)
    assert out["columns"] == [[-1, 1, "dispatch"], [-1, 1, "combine"]]
    assert out["values"] == [[4.0, None, 3.0], [4.0, 4.0, None]]
    assert out["hot_port"] == [0, 0]  # among the ports with data
