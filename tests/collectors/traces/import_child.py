"""One trace import in a child process, for the memory watchdog: Django set up on a migrated
SQLite file, a run of world size 4, then ``imports.import_trace`` — the real import path of the
CLI and the upload API. Prints one JSON line: outcome, message, peak RSS growth over the RSS
after setup (the peak reset there: VmHWM − VmRSS), CPU seconds of the import.

Run: python tests/collectors/traces/import_child.py FILE KIND RANK|- FILENAME
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


def _status_mb(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def main() -> None:
    path, kind, rank_arg, filename = sys.argv[1:5]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fabricmon.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from fabricmon.jobs import imports
    from fabricmon.jobs.models import Run
    from fabricmon.jobs.validation import InputError

    owner, _ = get_user_model().objects.get_or_create(username="hostile")
    run = Run.objects.create(name="hostile", owner=owner, world_size=4)
    # the peak so far (Django's setup) may be above what the import adds to the RSS now: reset the
    # peak to the current RSS (clear_refs 5) so growth is the import's own, not hidden under it
    Path("/proc/self/clear_refs").write_text("5")
    base_mb = _status_mb("VmRSS")
    cpu0 = time.process_time()
    out: dict[str, object] = {}
    try:
        with open(path, "rb") as f:
            _upload, result = imports.import_trace(
                run, kind, f, filename=filename, rank=None if rank_arg == "-" else int(rank_arg),
                size_bytes=os.path.getsize(path),
            )
        out = {"outcome": "imported", "message": f"stored {result.stored}, rejected {len(result.rejected)}"}
    except InputError as exc:
        out = {"outcome": "refused", "message": str(exc)}
    except Exception as exc:  # a crash is a finding: reported, not hidden
        out = {"outcome": "crashed", "message": f"{type(exc).__name__}: {exc}"[:2000]}
    out["cpu_s"] = time.process_time() - cpu0
    out["peak_growth_mb"] = _status_mb("VmHWM") - base_mb
    print(json.dumps(out))


if __name__ == "__main__":
    main()
