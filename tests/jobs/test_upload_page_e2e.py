"""The run page in a real Chromium: a trace above the inline limit is uploaded through the form,
the XHR answer is 202, and the same progress bar then follows the worker's import (polling the
upload's status) until it says imported with the count. Daphne + a real Celery worker
(``upload_stack``); screenshot in test-output/jobs-upload-imported.png."""

from __future__ import annotations

from pathlib import Path

import pytest
from upload_stack import ROOT, upload_stack, write_kineto_trace

pytestmark = [pytest.mark.e2e, pytest.mark.integration]
USER, PASSWORD = "owner-e2e", "owner-e2e-password"


@pytest.mark.timeout(240)
def test_run_page_shows_a_queued_import_to_the_end(browser, tmp_path: Path, redis_url: str, fabric_name: str) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "kineto_rank1.json"
    n_a2a = write_kineto_trace(trace, 4)
    with upload_stack(tmp_path, redis_url, f"import-{fabric_name}", inline_bytes=100_000) as stack:
        stack.manage("create_demo_user", "--username", USER, "--password", PASSWORD, "--role", "operators")
        context = browser.new_context(viewport={"width": 1300, "height": 900})
        try:
            page = context.new_page()
            page.goto(f"{stack.url}/accounts/login/?next=/jobs/")
            page.fill("input[name=username]", USER)
            page.fill("input[name=password]", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url("**/jobs/")
            page.fill("#new-run input[name=name]", "moe-upload")
            page.click("#new-run button[type=submit]")
            page.wait_for_url("**/jobs/runs/*/")
            page.select_option("#upload select[name=kind]", "kineto")
            page.set_input_files("#upload input[type=file]", str(trace))
            with page.expect_response(lambda r: r.url.endswith("/upload")) as answer:
                page.click("#upload button[type=submit]")
            assert answer.value.status == 202
            status = page.locator("#upload-status")
            status.filter(has_text="imported:").wait_for(timeout=120_000)
            assert f"imported: {n_a2a} stored" in status.inner_text(), stack.log_tail()
            assert page.eval_on_selector("#upload-progress", "el => el.value") == 100
            (ROOT / "test-output").mkdir(exist_ok=True)
            page.screenshot(path=str(ROOT / "test-output" / "jobs-upload-imported.png"), full_page=True)
            page.reload()
            assert 'data-state="done"' in page.content()
        finally:
            context.close()
