"""The running twin reports its MoE job live through the probe client path to a real fabricmon
(pytest-django's live server): run, tags and rank map exist, and every stored per-(step, layer,
phase) matrix equals the twin's own phase matrix (replayed from the same seed). With the server
down the twin keeps serving, and the lost phases are counted in /status."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest

from fabricmon.jobs.models import Run, TrafficMatrix
from fabricmon.jobs.tokens import issue_token
from fabricmon.topology.services import import_fabric
from tests.topologies import four_leaf_two_spine
from twin.cluster import Twin
from twin.config import TwinConfig
from twin.moe import MoeTraffic

pytestmark = [pytest.mark.integration]

SMALL = {"servers": 2, "gpus_per_server": 4, "spines": 2}


def _wait(pred, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


@pytest.mark.django_db(transaction=True)
def test_twin_reports_its_phases_live_and_matrices_match(live_server, django_user_model, tmp_path) -> None:
    user = django_user_model.objects.create_user("twinjob")
    _, token = issue_token(user)
    token_file = tmp_path / "token"  # written after the twin started (as compose's migrate does)
    cfg = TwinConfig(name="livejob", **SMALL, report_url=live_server.url, report_token_file=str(token_file),
                     run_name="twin-live", report_connect_timeout_s=30)
    with Twin(cfg) as tw:
        tw.reporter.retry_s = 0.05
        _wait(lambda: "No such file" in tw.status()["report"]["error"])
        import_fabric(tw.fabric)  # a run needs its fabric in the topology: the server refuses an unknown one
        token_file.write_text(token + "\n")
        _wait(lambda: tw.status()["report"]["phases_reported"] >= 3 * 2 * cfg.job.layers)
        # the twin keeps serving while it reports
        assert tw.ticks > 0
    report = tw.status()["report"]
    assert report["state"] == "ended", report
    run = Run.objects.get(pk=report["run_id"])
    assert run.name == "twin-live" and run.state == Run.State.FINISHED and run.world_size == 8
    assert {"twin", "moe", "routing=pxn", "ep=8"} <= set(run.tags)
    ranks = {e.rank: e for e in run.ranks.all()}
    assert sorted(ranks) == list(range(8))
    assert (ranks[5].host, ranks[5].switch, ranks[5].switch_port) == (
        tw.fabric.hosts[1].name, *next((g.switch, g.port) for g in tw.fabric.hosts[1].gpus if g.index == 1))
    # phases that ended while the token file was missing are dropped (counted), none after
    assert report["events_dropped"] == report["phases_dropped"] * 8 and report["events_rejected"] == 0
    assert report["events_posted"] == report["phases_reported"] * 8

    stored = {(m.step, m.layer, m.phase): m for m in TrafficMatrix.objects.filter(run=run, source="twin")}
    assert len(stored) == report["phases_reported"]
    replay = MoeTraffic(cfg.job, 8, seed=cfg.seed)
    truth: dict[tuple[int, int, str], np.ndarray] = {}
    while len(truth) < 2 * cfg.job.layers * (max(s for s, _, _ in stored) + 1):
        for lt in replay.next_step():
            truth[(lt.step, lt.layer, "dispatch")] = lt.dispatch_bytes
            truth[(lt.step, lt.layer, "combine")] = lt.combine_bytes
    for key, m in stored.items():
        want = np.rint(truth[key]).astype(np.int64)
        assert np.array_equal(m.sent_array(), want), key
        assert np.array_equal(m.received_array(), want), key


def test_server_down_twin_keeps_running_and_counts_drops() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = TwinConfig(name="nojob", **SMALL, report_url=f"http://127.0.0.1:{port}", report_token="t" * 20)
    with Twin(cfg) as tw:
        started_ns = time.time_ns()  # the twin's history begins before this (start() has returned)
        tw.reporter.retry_s = 0.05
        _wait(lambda: tw.status()["report"]["phases_dropped"] >= 4)
        st = tw.status()["report"]
        assert st["state"] == "connecting" and st["run_id"] is None and "create run" in st["error"]
        ticks = tw.ticks
        _wait(lambda: tw.ticks > ticks + 3)  # still ticking: counters move, agents answer
        _wait(lambda: time.time_ns() - started_ns > 600_000_000)
        t = time.time_ns()
        t1 = max(t - 500_000_000, started_ns)  # never before the kept history (failed once in CI)
        assert tw.true_rates(None, t1, t - 100_000_000)["out_octets_per_s"].sum() >= 0
    assert tw.status()["report"]["state"] == "ended" or tw.status()["report"]["state"] == "failed"


def test_block_reporting_keeps_runs_of_consecutive_steps() -> None:
    """``every_steps=4, block_steps=2``: steps 0-1, 8-9, 16-17 … — a quarter of the job, as every
    4th step would be, but in runs of consecutive steps whose poll intervals the gates can use."""
    from twin.live_reporter import LiveJobReporter
    from twin.schedule import Phase

    fabric = four_leaf_two_spine("blocks", servers=2)
    reporter = LiveJobReporter(fabric, "http://127.0.0.1:9", "t" * 20, run_name="b", tags=[],
                               every_steps=4, block_steps=2)
    zeros = np.zeros(1)
    for step in range(24):
        reporter.on_phase(Phase(step, 0, "dispatch", step, step + 1, zeros, zeros, zeros, 0, 0.0), np.zeros((8, 8)))
    assert [p[0] for p in reporter._pending] == [0, 1, 8, 9, 16, 17]
    with pytest.raises(ValueError, match="block_steps"):
        LiveJobReporter(fabric, "http://127.0.0.1:9", "t" * 20, run_name="b", tags=[], block_steps=0)
