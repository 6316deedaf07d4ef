"""The probe's own rank-map entry: the host the topology knows, the local rank from whichever
launcher started the process, and no guessed NIC (it used to send the first interface of
/sys/class/net — "eth0", a name no topology has — and no local rank without torchrun: an mp.spawn
or srun job's map placed nothing, 0 % coverage)."""

from __future__ import annotations

import pytest

from collectors.probe.probe import LOCAL_RANK_VARS, A2AProbe, local_rank_from_env


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*LOCAL_RANK_VARS, "FABRICMON_HOST", "FABRICMON_NIC"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("var", LOCAL_RANK_VARS)
def test_the_local_rank_comes_from_any_launcher(monkeypatch: pytest.MonkeyPatch, var: str) -> None:
    monkeypatch.setenv(var, "3")
    assert local_rank_from_env() == 3
    assert A2AProbe(rank=11, host="node001").rank_map_entry() == {"rank": 11, "host": "node001", "local_rank": 3}


def test_no_nic_is_guessed_and_a_named_one_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    assert local_rank_from_env() is None
    assert "nic" not in A2AProbe(rank=0, host="h").rank_map_entry()
    monkeypatch.setenv("FABRICMON_NIC", "mlx5_2")
    assert A2AProbe(rank=0, host="h", local_rank=2).rank_map_entry() == {
        "rank": 0, "host": "h", "local_rank": 2, "nic": "mlx5_2"}


def test_fabricmon_host_names_the_topology_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABRICMON_HOST", "node017")
    monkeypatch.setenv("LOCAL_RANK", "x")  # not a number: the next launcher's variable is asked
    monkeypatch.setenv("SLURM_LOCALID", "5")
    assert A2AProbe(rank=1).rank_map_entry() == {"rank": 1, "host": "node017", "local_rank": 5}


def test_post_rank_map_never_raises_and_keeps_the_answer() -> None:
    class Client:
        def post_rank_map(self, run_id: int, entries: list[dict[str, object]]) -> tuple[int, object]:
            assert run_id == 7
            return 422, {"rejected": [{"reason": "rank 0: host 'h' is not in fabric 'f'"}]}

    class Down:
        def post_rank_map(self, run_id: int, entries: list[dict[str, object]]) -> tuple[int, object]:
            raise OSError("connection refused")

    probe = A2AProbe(rank=0, host="h", local_rank=0)
    assert probe.post_rank_map(Client(), 7)["rejected"][0]["reason"].endswith("'f'")
    assert probe.rank_map_answer is not None
    assert probe.post_rank_map(Down(), 7) is None
    assert A2AProbe(rank=0).post_rank_map() is None  # no poster sink, nowhere to post
