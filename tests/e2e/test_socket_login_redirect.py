"""A session that ends while the fabric page is open: the socket's next handshake is refused with
4401 (accepted, then closed, so the browser sees the code and not 1006) and the page's JS sends
the user to the login form, coming back to the same page. Real Daphne, real Chromium."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def test_fabric_page_goes_to_the_login_form_when_its_socket_says_4401(page, fabric_name, log_in) -> None:
    log_in(f"/fabric/{fabric_name}/")
    page.wait_for_url(f"**/fabric/{fabric_name}/")
    page.wait_for_function("window.fabricmon && fabricmon.state.ws && fabricmon.state.ws.readyState === 1")
    page.context.clear_cookies()  # the session is gone (logged out elsewhere, expired)
    page.evaluate("fabricmon.state.ws.close()")  # a dropped socket: the page reconnects by itself
    page.wait_for_url("**/accounts/login/?next=*", timeout=30_000)
    assert page.url.endswith(f"/accounts/login/?next=%2Ffabric%2F{fabric_name}%2F")
