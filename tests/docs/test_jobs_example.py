"""docs/jobs.md's worked example, run literally: every ``bash`` block of "From a token to an ended
run" in order, in one working directory, against a real server on 127.0.0.1 (Daphne, its own
SQLite file, real Redis); a ``python title="…"`` block is written to that file (the training
script, which the example's torchrun then runs on 4 gloo ranks as 2 "nodes"); a ``text`` block
right after a ``bash`` block is that block's expected output. Then the run is checked through the
API: ended, its ranks placed, the probe's, the HTTP-posted and the trace's events stored."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from asgi_server import ROOT, live_server

pytestmark = pytest.mark.integration
DOC = ROOT / "docs" / "jobs.md"
SECTION = "## From a token to an ended run"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.M | re.S)


def example_blocks() -> list[tuple[str, str, str]]:
    """(language, info after it, code) of every fenced block in the example's section, in order."""
    text = DOC.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return [(m.group(1), m.group(2).strip(), m.group(3)) for m in FENCE.finditer(text[start:end])]


def test_the_section_holds_the_whole_path() -> None:
    """The path the issue asks for, each step present as code (so each is run below)."""
    blocks = example_blocks()
    code = "\n".join(c for _, _, c in blocks)
    for needed in ("create_api_token", "--create-user", '"fabric": "su1"', "/ranks/build", "set_step(",
                   "poster.close(", "/events", "/uploads", "/end", "torchrun"):
        assert needed in code, needed
    assert [lang for lang, _, _ in blocks].count("bash") >= 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ran(redis_url: str, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("jobs-doc")
    (tmp / "server").mkdir()
    srv = live_server(tmp / "server", redis_url)
    work = tmp / "work"
    work.mkdir()
    (work / "manage.py").symlink_to(ROOT / "manage.py")  # "python manage.py …" as on the server
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **srv.env, "FABRICMON_URL": srv.url, "PYTHONPATH": str(ROOT), "MASTER_PORT": str(_free_port()),
        "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}", "OMP_NUM_THREADS": "1",
    }
    outputs: list[tuple[str, str]] = []
    blocks = example_blocks()
    try:
        for i, (lang, info, code) in enumerate(blocks):
            if lang == "python":
                name = re.search(r'title="([^"]+)"', info)
                assert name, f"a python block of the example without a file name: {code[:80]}"
                (work / name.group(1)).write_text(code)
            elif lang == "bash":
                done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=work, env=env,
                                      capture_output=True, text=True, timeout=600, check=False)
                assert done.returncode == 0, f"block {i} failed:\n{code}\n{done.stdout}\n{done.stderr[-4000:]}"
                outputs.append((code, done.stdout))
            elif lang == "text":
                assert blocks[i - 1][0] == "bash", "a text block is the output of the bash block before it"
                assert outputs[-1][1].strip() == code.strip(), (outputs[-1][1], code)
        token = (work / "token.txt").read_text().strip()
        run_id = int((work / "run_id.txt").read_text())
        yield {"srv": srv, "work": work, "token": token, "run": run_id, "outputs": outputs}
    finally:
        srv.forget_fabric("su1")
        srv.stop()


def _get(ran: dict[str, Any], path: str) -> Any:
    req = urllib.request.Request(ran["srv"].url + path, headers={"Authorization": f"Bearer {ran['token']}"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = resp.read()
    return json.loads(body) if not path.endswith("/events") else [json.loads(x) for x in body.splitlines()]


def test_the_example_ends_a_run_with_its_ranks_placed_and_every_source_stored(ran) -> None:  # type: ignore[no-untyped-def]
    run = _get(ran, f"/jobs/api/runs/{ran['run']}")
    assert run["state"] == "finished" and run["fabric"] == "su1"
    assert run["tags"] == ["ep=4", "model=toy-moe"]
    assert run["rank_map"]["placed"] == 4 and run["rank_map"]["missing_ranks"] == []
    ranks = _get(ran, f"/jobs/api/runs/{ran['run']}/ranks")["ranks"]
    # torchrun numbers node 0's processes 0-1: the probes' own entries agree with the helper's map
    assert [(r["rank"], r["host"], r["switch"], r["switch_port"]) for r in ranks] == [
        (0, "node001", "leaf-r0", "Ethernet1"), (1, "node001", "leaf-r1", "Ethernet1"),
        (2, "node002", "leaf-r0", "Ethernet2"), (3, "node002", "leaf-r1", "Ethernet2"),
    ]
    assert {r["source"] for r in ranks} == {"upload"}  # the probes' posts (after the helper's)
    events = _get(ran, f"/jobs/api/runs/{ran['run']}/events")
    by_source: dict[str, int] = {}
    for e in events:
        by_source[e["source"]] = by_source.get(e["source"], 0) + 1
    # 4 ranks x 3 steps x 2 layers x (dispatch, combine); the 2 posted lines; rank 0's trace
    assert by_source["probe"] == 48 and by_source["api"] == 2 and by_source["kineto"] >= 12, by_source
    probe_steps = sorted({e["step"] for e in events if e["source"] == "probe"})
    assert probe_steps == [0, 1, 2]  # set_step() reached every event
    outputs = "\n".join(out for _, out in ran["outputs"])
    for rank in range(4):
        assert f"rank {rank}: 12 events stored, 0 lost" in outputs, outputs
    assert '"stored":2' in outputs and '"state":"done"' in outputs and "finished" in outputs
