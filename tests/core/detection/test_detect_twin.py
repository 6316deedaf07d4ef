"""Issue 7: detection quality on seeded *twin* scenarios with ground truth (twin/scenarios.py).

20 seeds of each scenario — static incast, moving incast, balanced all-to-all (600 windows = 10
minutes each), ECMP collision, PFC storm — run through detect_window + the alert lifecycle; the
confusion table is printed (``pytest -s``) and the issue's thresholds are asserted.
"""

from __future__ import annotations

import pytest

from twin.scenario_scoring import format_table, score
from twin.scenarios import run_batch


@pytest.mark.slow
def test_twin_scenarios_confusion_table_meets_issue_7() -> None:
    result = score(seeds=20, batch=run_batch)
    print("\n" + format_table(result))
    table = result["table"]
    assert isinstance(table, dict)
    # moving incast: recall and precision ≥ 0.95, per run and per window
    assert result["moving_recall"] >= 0.95 and result["moving_precision"] >= 0.95
    assert result["moving_window_recall"] >= 0.95 and result["moving_window_precision"] >= 0.95
    # zero alerts from 20 × 10 minutes of balanced traffic
    assert result["balanced_windows"] == 20 * 600
    assert result["balanced_alert_windows"] == 0
    assert table["balanced"]["none"] == 20 and sum(table["balanced"].values()) == 20
    # every scenario raised its own alert on every seed
    assert table["static"]["incast"] == 20 and table["static"]["moving_incast"] == 0
    assert table["moving"]["moving_incast"] == 20
    assert table["ecmp"]["ecmp_imbalance"] == 20 and table["ecmp"]["moving_incast"] == 0
    assert table["pfc"]["pfc_storm"] == 20 and table["pfc"]["moving_incast"] == 0
    # the alert comes within 2 windows of onset
    lat = result["latency_windows"]
    assert isinstance(lat, dict)
    for kind in ("static", "moving", "ecmp", "pfc"):
        assert len(lat[kind]) == 20, kind
        assert max(lat[kind]) <= 2, (kind, lat[kind])
    # and detection names the twin's true hot port
    assert result["hot_port_hit_rate"] >= 0.9
