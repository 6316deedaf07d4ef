"""plotly.js is pinned to the version the pages are written for, and the pages use only what that
plotly.js has: the served file's banner is that version (else ``manage.py check`` fails), every
colour scale named in the frontend exists in it, and no chart title is a bare string (ignored
since plotly.js 3)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fabricmon.live import staticfinders
from fabricmon.live.staticfinders import PLOTLY_JS_VERSION, PlotlyFinder, served_plotly_js_version

STATIC = Path(__file__).resolve().parents[2] / "frontend" / "static"
PAGES = sorted(STATIC.rglob("*.js"))


def served(client) -> str:  # type: ignore[no-untyped-def]
    resp = client.get("/static/vendor/plotly.min.js")
    assert resp.status_code == 200
    return b"".join(resp.streaming_content).decode("utf-8", errors="replace")


def plotly_scales(text: str) -> set[str]:
    """The named colour scales of a plotly.js bundle (its scales table: ``Name:[[0,"rgb(…`` / ``"#…``)."""
    return set(re.findall(r'([A-Za-z]+):\[\[0,"(?:rgb\(|#)', text))


def test_the_served_plotly_js_is_the_one_the_pages_are_written_for(client) -> None:
    banner = re.search(r"plotly\.js v(\d+\.\d+\.\d+)", served(client)[:400])
    assert banner and banner.group(1) == PLOTLY_JS_VERSION == served_plotly_js_version()
    assert PlotlyFinder().check() == []


def test_another_plotly_js_fails_the_system_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(staticfinders, "PLOTLY_JS_VERSION", "2.35.2")
    errors = PlotlyFinder().check()
    assert [e.id for e in errors] == ["fabricmon.E001"] and "2.35.2" in errors[0].msg


def test_every_colour_scale_the_pages_name_exists_in_the_served_plotly_js(client) -> None:
    scales = plotly_scales(served(client))
    assert {"YlOrRd", "Viridis", "Cividis", "Hot"} <= scales and "Inferno" not in scales  # (matplotlib's)
    named = {(p.relative_to(STATIC).as_posix(), m) for p in PAGES
             for m in re.findall(r"colorscale:\s*[\"'](\w+)[\"']", p.read_text())}
    assert named, "no colour scale named anywhere: the scan is broken"
    unknown = sorted((page, name) for page, name in named if name not in scales)
    assert not unknown, f"colour scales plotly.js {PLOTLY_JS_VERSION} does not have (it falls back silently): {unknown}"


def test_no_chart_title_is_a_bare_string() -> None:
    """``title: "…"`` in a layout, axis or colour bar is ignored by plotly.js ≥ 3: say ``{text: …}``."""
    plotly_calls = re.compile(r"Plotly\.(?:newPlot|react|relayout|update)\(", re.S)
    bare = re.compile(r"\btitle:\s*[\"'`]")
    found = [(p.relative_to(STATIC).as_posix(), n) for p in PAGES if plotly_calls.search(p.read_text())
             for n, line in enumerate(p.read_text().splitlines(), 1) if bare.search(line)]
    assert not found, found
