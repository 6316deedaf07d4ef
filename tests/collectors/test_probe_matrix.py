"""Phase events from a traffic matrix: one event per rank, row = sent, column = received, and a
process group's matrix (an EP group's all-to-all) named by its members' global ranks."""

from __future__ import annotations

import numpy as np
import pytest

from collectors.probe import events_from_matrix
from collectors.probe.peers import as_maps, peer_bytes


def _events(m: np.ndarray, **kw: object) -> list[dict[str, object]]:
    return list(events_from_matrix(m, step=2, layer=1, phase="dispatch", start_ns=10, end_ns=20,
                                   id_prefix="t", **kw))  # type: ignore[arg-type]


def test_a_group_matrix_names_global_ranks_peers_hosts_and_ids() -> None:
    block = np.array([[0.0, 5.0, 7.4], [1.0, 0.0, 2.0], [3.0, 4.6, 0.0]])
    hosts = [f"h{r // 4}" for r in range(12)]
    ev = _events(block, ranks=range(8, 11), hosts=hosts)
    assert [e["rank"] for e in ev] == [8, 9, 10]
    assert ev[0]["pg_ranks"] == [8, 9, 10] and ev[0]["host"] == "h2"
    # per pg_ranks entry: the row sent, the column received (rounded to whole bytes)
    assert ev[0]["send_bytes_per_pg_rank"] == [0, 5, 7] and ev[1]["recv_bytes_per_pg_rank"] == [5, 0, 5]
    assert peer_bytes(ev[0], "send") == {"8": 0, "9": 5, "10": 7}
    assert as_maps(ev[1])["recv_bytes_per_peer"] == {"8": 5, "9": 0, "10": 5}
    assert "recv_bytes_per_pg_rank" not in as_maps(ev[1])
    assert ev[2]["id"] == "t-2-1-dispatch-10"


def test_without_ranks_the_matrix_is_the_whole_job() -> None:
    ev = _events(np.ones((2, 2)))
    assert [e["rank"] for e in ev] == [0, 1] and ev[1]["pg_ranks"] == [0, 1]
    with pytest.raises(ValueError, match="ranks names 3 ranks for a 2 x 2"):
        _events(np.ones((2, 2)), ranks=[0, 1, 2])
