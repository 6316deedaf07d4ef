"""The run page's fabric and rank-map forms in headless Chromium (real Daphne): a run created
without a fabric says so, gets one from the *Set fabric* form, and its rank map is built from the
job's hosts by the helper — every rank on its NIC's rail-leaf port, missing ranks named — with no
console error. Screenshot: test-output/run-rank-map.png."""

from __future__ import annotations

import ast

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
USER = "op-e2e"
FABRIC = "rmap-e2e"

MAKE = """
from django.contrib.auth import get_user_model
from fabricmon.jobs.runs import create_run
print(repr(create_run(get_user_model().objects.get(username={user!r}), "rank-map-e2e", world_size=6).pk))
"""


def test_the_fabric_is_set_and_the_rank_map_built_from_the_page(
    page, daphne_server, log_in, screenshot, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    daphne_server.manage("generate_topology", "--name", FABRIC, "--servers", "2", "--gpus-per-server", "2",
                         "--spines", "1", "-o", str(tmp_path / "fab.yaml"))  # fmt: skip
    daphne_server.manage("load_topology", str(tmp_path / "fab.yaml"))
    run_id = ast.literal_eval(daphne_server.manage("shell", "-c", MAKE.format(user=USER)).strip().splitlines()[-1])
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        log_in(f"/jobs/runs/{run_id}/")
        assert "none: the phase views need the run's fabric" in page.inner_text("#run-fabric")
        page.select_option("#fabric-form select[name=fabric]", FABRIC)
        page.click("#fabric-form button[type=submit]")
        page.wait_for_load_state()
        assert f"fabric set to {FABRIC}" in page.inner_text("main")
        page.fill("#rank-build textarea[name=hosts]", "node002.cluster.local\nnode001")
        page.click("#rank-build button[type=submit]")
        page.wait_for_load_state()
        check = page.inner_text("#rank-check")
        assert check.startswith(f"4 of 6 ranks placed on fabric '{FABRIC}'") and "ranks 4–5" in check, check
        rows = page.locator("table.health tbody tr").all_inner_texts()
        assert rows[0].split("\t") == ["0", "node002", "0", "gpu0", "mlx5_0", "leaf-r0", "Ethernet2"], rows
        assert len(rows) == 4
        screenshot("run-rank-map")
        assert not errors, errors
    finally:
        daphne_server.forget_fabric(FABRIC)
