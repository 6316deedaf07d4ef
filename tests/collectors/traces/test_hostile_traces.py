"""Hostile trace files through the real import path, each in a child process under a memory
watchdog (peak RSS growth over the child's baseline): every one refused with its message (or, for
the few that are merely odd, imported), none costing more than ``MAX_GROWTH_MB``. A table of the
cases is printed (``pytest -s``) and written to test-output/hostile-traces.txt."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from asgi_server import manage
from hostile_traces import cases

ROOT = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).with_name("import_child.py")
MAX_GROWTH_MB = 100
pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("hostile-db")
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}", "FABRICMON_VAR_DIR": str(tmp),
           "DJANGO_SETTINGS_MODULE": "fabricmon.settings"}
    manage(env, "migrate", "--noinput", "-v", "0")
    return tmp / "db.sqlite3"


def _run_case(case, tmp: Path, db_template: Path) -> dict:  # type: ignore[no-untyped-def]
    path = tmp / case.filename.replace("/", "_")
    case.build(path)
    db = tmp / "db.sqlite3"
    shutil.copy(db_template, db)
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{db}", "FABRICMON_VAR_DIR": str(tmp),
           "DJANGO_SETTINGS_MODULE": "fabricmon.settings", "LOG_LEVEL": "WARNING"}
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(path), case.kind, "-" if case.rank is None else str(case.rank), case.filename],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False,
    )
    path.unlink()
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"outcome": f"child died (rc {proc.returncode})", "message": proc.stderr[-1500:],
                "peak_growth_mb": float("nan"), "cpu_s": float("nan")}
    return json.loads(lines[-1])


@pytest.mark.timeout(1800)
def test_hostile_traces_are_refused_with_their_reason_within_bounded_memory(migrated_db, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows, problems = [], []
    for case in cases():
        case_dir = tmp_path / f"c{len(rows)}"
        case_dir.mkdir()
        got = _run_case(case, case_dir, migrated_db)
        rows.append((case.name, got))
        expected = "imported" if case.expect is None else "refused"
        words = case.expect or "stored 1, rejected 0"
        if got["outcome"] != expected or words.lower() not in got["message"].lower():
            problems.append(f"{case.name}: expected {expected} with {case.expect!r}, got {got['outcome']}: "
                            f"{got['message'][:300]}")
        if not got["peak_growth_mb"] <= MAX_GROWTH_MB:
            problems.append(f"{case.name}: peak RSS grew {got['peak_growth_mb']:.0f} MB")
    table = [f"{'case':44} {'outcome':9} {'peak RSS +MB':>12} {'CPU s':>6}  message"]
    for name, got in rows:
        first = got["message"].splitlines()[0][:110] if got["message"] else ""
        table.append(f"{name:44} {got['outcome'][:9]:9} {got['peak_growth_mb']:12.1f} {got['cpu_s']:6.2f}  {first}")
    print("\n" + "\n".join(table))
    (ROOT / "test-output").mkdir(exist_ok=True)
    (ROOT / "test-output" / "hostile-traces.txt").write_text("\n".join(table) + "\n")
    assert not problems, "\n".join(problems)


def _status_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak(pid: int) -> float:
    """Reset the process's peak RSS to its current RSS (``clear_refs`` 5); the RSS now."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _status_mb(pid, "VmRSS")


@pytest.mark.timeout(1800)
def test_hostile_traces_uploaded_to_the_real_server_answer_4xx_with_the_reason(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The same files through HTTP (Daphne, the upload API, imported in the request): a 422 naming
    ``file`` and the reason for each refusal, 200 for the odd-but-valid; the server's peak RSS
    growth per upload (VmHWM, reset before each) beyond the upload's own size stays within the
    bound (Daphne queues a request's whole body as ASGI messages before Django reads it: that
    much is Daphne's); it still answers after. Imported inline (64 MB limit) to see each 422.
    Before ``fabricmon.serve`` turned it off, Twisted's multipart parse cost a 40 MB upload +480 MB."""
    from asgi_server import start_daphne

    from collectors.probe import IngestClient

    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "FABRICMON_VAR_DIR": str(tmp_path),
           "DJANGO_SETTINGS_MODULE": "fabricmon.settings", "FABRICMON_UPLOAD_INLINE_BYTES": str(64 << 20)}
    manage(env, "migrate", "--noinput", "-v", "0")
    token = manage(env, "create_api_token", "hostile", "--create-user").strip()
    proc, base = start_daphne(env, tmp_path / "daphne.log")
    try:
        client = IngestClient(base, token, timeout_s=120)
        run = client.create_run("hostile uploads", world_size=4)
        problems, table, worst = [], [], 0.0
        for case in cases():
            path = tmp_path / case.filename
            case.build(path)
            size_mb = path.stat().st_size / (1 << 20)
            rss0 = _reset_peak(proc.pid)
            status, body = client.upload_trace(run, case.kind, path, rank=case.rank, mode="inline")
            growth = _status_mb(proc.pid, "VmHWM") - rss0
            worst = max(worst, growth - size_mb)
            path.unlink()
            text = json.dumps(body) if not isinstance(body, str) else body
            table.append(f"{case.name:44} {status} {size_mb:6.1f} MB up {growth:7.1f} MB peak  {text[:100]}")
            if case.expect is None:
                if status != 200 or body.get("stored", 0) + body.get("duplicates", 0) < 1 or body.get("rejected_count"):
                    problems.append(f"{case.name}: {status} {text[:300]}")
                continue
            # a well-formed upload whose file cannot be read is a 422 naming the file (or the rank
            # given beside it: "… the run's world_size") and why
            said = text.lower().replace("world_size", "world size")
            if not (status == 422 and body.get("field") in ("file", "rank") and case.expect.lower() in said):
                problems.append(f"{case.name}: expected 422 file {case.expect!r}, got {status} {text[:300]}")
        table.append(f"server peak RSS growth beyond the upload's own size, worst case: {worst:.0f} MB")
        print("\n" + "\n".join(table))
        (ROOT / "test-output").mkdir(exist_ok=True)
        (ROOT / "test-output" / "hostile-traces-http.txt").write_text("\n".join(table) + "\n")
        status, _ = client.request("GET", f"/jobs/api/runs/{run}")
        assert status == 200
        assert not problems, "\n".join(problems)
        assert worst <= MAX_GROWTH_MB, "\n".join(table)
    finally:
        proc.terminate()
        proc.wait(10)
