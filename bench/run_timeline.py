"""Run-page timeline benchmark: the whole-run and a zoomed timeline of a long run (default 1 M
events, 256 ranks, batches of 1,000 as a probe posts them), through the real view with a logged-in
client, beside the reference — what the page did before: decode every block of the run
(``blocks.event_columns``) and serialise its first 20,000 events.

Figures: wall-clock seconds per answer (best of ``--repeat``), answer bytes, and the ratio of the
reference to the aggregated answer. The target (issue 12): whole-run answer ≤ 1 s at 1 M events.

    .venv/bin/python bench/run_timeline.py [--events 1000000] [--ranks 256] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="fabricmon-timeline-")
    from tests import secret_env

    secret_env.apply(os.environ)  # a bench database: the test keys unless keys are configured
    os.environ.update({"DJANGO_SETTINGS_MODULE": "fabricmon.settings",
                       "DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3", "FABRICMON_VAR_DIR": tmp})
    import django

    django.setup()
    import numpy as np
    import orjson
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from fabricmon.jobs import blocks, runs
    from tests.jobs.long_runs import T0_NS, fill_run

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench", password="pw")
    run = runs.create_run(user, "long", world_size=args.ranks)
    t = time.perf_counter()
    fill_run(run, args.events, args.ranks)
    print(f"stored {args.events:,} events in {time.perf_counter() - t:.1f} s", flush=True)
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    url = f"/jobs/runs/{run.pk}/timeline.json"

    def best(fn) -> tuple[float, int]:
        times, size = [], 0
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            size = fn()
            times.append(time.perf_counter() - t0)
        return min(times), size

    def whole() -> int:
        resp = client.get(url)
        assert resp.status_code == 200, resp.content[:200]
        return len(resp.content)

    mid = T0_NS + (args.events // args.ranks) * 5_000_000
    def zoomed() -> int:
        return len(client.get(url, {"t1_ns": mid, "t2_ns": mid + 50_000_000}).content)

    def reference() -> int:  # the page before: every block decoded, the first 20,000 events sent
        cols = blocks.event_columns(run)
        head = cols.take(np.arange(min(20_000, len(cols))))
        return len(orjson.dumps({"rank": head.rank.tolist(), "start_ns": head.start_ns.tolist(),
                                 "end_ns": head.end_ns.tolist(), "phase": head.phase.tolist()}))

    whole_s, whole_b = best(whole)
    zoom_s, zoom_b = best(zoomed)
    ref_s, ref_b = best(reference)
    print(f"whole run   {whole_s * 1e3:8.1f} ms  {whole_b / 1e3:8.1f} KB  (aggregated: every event counted)")
    print(f"zoom 50 ms  {zoom_s * 1e3:8.1f} ms  {zoom_b / 1e3:8.1f} KB  (exact bars)")
    print(f"reference   {ref_s * 1e3:8.1f} ms  {ref_b / 1e3:8.1f} KB  (decode all, first 20,000 events only)")
    print(f"BENCH run_timeline events={args.events} ranks={args.ranks} whole_s={whole_s:.3f} "
          f"whole_kb={whole_b / 1e3:.0f} zoom_s={zoom_s:.3f} reference_s={ref_s:.3f} "
          f"speedup={ref_s / whole_s:.1f} target_whole_s=1.0")
    return 0 if whole_s <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
