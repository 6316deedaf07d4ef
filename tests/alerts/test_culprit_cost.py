"""What naming culprits costs a window with many open alerts, and where it runs.

At 16,896 ports the scale run had tens of incast alerts open at once on a 5,632-rank job. Each one
still without a named phase looked again every few seconds and decoded the job's event blocks on
its own, inside the window's write transaction: SQLite's one write lock was held for seconds while
every ingest batch waited. Real rows here (a run, its rank map, event blocks through ingest) on
the small two-leaf fabric, every host port hot at once."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fabricmon.alerts.attribution import REFRESH_S
from fabricmon.alerts.models import Alert
from fabricmon.jobs import ingest, runs
from fabricmon.jobs.models import Run
from tests.alerts.test_alert_culprit import T0_NS, S, _ev, _port
from tests.alerts.test_alert_services import T0, geo, windows  # noqa: F401 (geo is a fixture)


def _run_on_every_host_port(geo, django_user_model):  # noqa: F811
    """Rank r on the r-th host-facing port; the alerts fire at T0+100 s with nothing reported then,
    and the job's events for every rank (received in layer 2 dispatch) arrive afterwards."""
    owner = django_user_model.objects.create_user("bob", password="pw")
    run = runs.create_run(owner, "moe-big", fabric="su1", world_size=64)
    Run.objects.filter(pk=run.pk).update(started_at=T0 - timedelta(hours=1))
    host_ports = [int(p) for p in np.flatnonzero(geo.is_leaf_host)]
    entries = [{"rank": r, "host": f"node{r:03d}", "local_rank": 0, "gpu": "0",
                "switch": _port(geo, p)[0], "switch_port": _port(geo, p)[1]} for r, p in enumerate(host_ports)]
    stored, errors = runs.store_rank_map(run, entries)
    assert stored == len(host_ports) and not errors
    return run, host_ports


def _hot(geo, host_ports, n, start):  # noqa: F811
    return windows(geo, [host_ports] * n, fabric="su1", start=start)


def _post_events(run, host_ports) -> None:
    events = [_ev(r, r, 2, "dispatch", T0_NS + 101 * S, recv={"0": 1_000 + r}) for r in range(len(host_ports))]
    assert ingest.ingest_events(run, events).stored == len(host_ports)


def _event_reads(queries) -> list[str]:
    return [q["sql"] for q in queries if '"jobs_eventblock"' in q["sql"]]


@pytest.mark.django_db
def test_every_alert_of_a_window_shares_one_decode_of_the_jobs_events(geo, django_user_model) -> None:  # noqa: F811
    run, host_ports = _run_on_every_host_port(geo, django_user_model)
    _hot(geo, host_ports, 3, start=100)
    firing = Alert.objects.filter(kind="incast", state="firing")
    assert firing.count() >= 4 and not any(a.attribution["phase"] for a in firing)
    _post_events(run, host_ports)
    with CaptureQueriesContext(connection) as seen:
        _hot(geo, host_ports, int(REFRESH_S) + 1, start=103)
    named = {a.key: a.attribution for a in Alert.objects.filter(kind="incast", state="firing")}
    assert all(a["phase"] == "dispatch" and a["layer"] == 2 for a in named.values()), named
    assert len({a["rank"] for a in named.values()}) == len(named)  # each its own rank, not a shared answer
    # one block-index aggregate and one decode for all of them (the old code: one each per alert)
    reads = _event_reads(seen.captured_queries)
    assert len(reads) == 2, reads


@pytest.mark.django_db(transaction=True)
def test_looking_again_for_culprits_holds_no_write_transaction(geo, django_user_model) -> None:  # noqa: F811
    """In a window where nothing fires, the look-ups read the job's blocks in autocommit: SQLite's
    write lock (BEGIN IMMEDIATE … COMMIT) is not held while events decode."""
    run, host_ports = _run_on_every_host_port(geo, django_user_model)
    _hot(geo, host_ports, 3, start=100)
    _post_events(run, host_ports)
    in_transaction: list[bool] = []

    def watch(execute, sql, params, many, context):
        if '"jobs_eventblock"' in sql:
            in_transaction.append(connection.in_atomic_block)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch):
        _hot(geo, host_ports, int(REFRESH_S) + 1, start=103)
    assert in_transaction and not any(in_transaction), in_transaction
    assert all(a.attribution["phase"] == "dispatch" for a in Alert.objects.filter(kind="incast", state="firing"))
