"""A run's report (a download: one self-contained HTML file), its per-port bytes as CSV and
Parquet (streamed), and two runs side by side. Thin shells over ``services`` and ``exports``.

Access (``base.access``): a run's owner and operators; a run someone may not see is a 404 like a
missing one, in the comparison too (either run); anonymous users get the login redirect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from functools import cache
from pathlib import Path

from asgiref.sync import sync_to_async
from django.contrib.staticfiles import finders
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.utils.text import slugify
from django.views.decorators.http import require_GET

from fabricmon.base import access
from fabricmon.core.phases.routing import ROUTING_MODES, Routing
from fabricmon.jobs.models import Run
from fabricmon.phases.state import unknown_fabric
from fabricmon.reports import exports, services
from fabricmon.topology.models import Fabric


class BadQueryError(ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field


def _run(request: HttpRequest, run_id: int) -> Run:
    run: Run = access.check_run(request.user, Run.objects.filter(pk=run_id).first())
    return run


def _routing(request: HttpRequest) -> Routing:
    mode, seed = request.GET.get("routing", "pxn"), request.GET.get("seed", "0")
    if mode not in ROUTING_MODES or not seed.lstrip("-").isdigit():
        raise BadQueryError("routing", f"routing must be one of {', '.join(ROUTING_MODES)} (seed an integer)")
    return Routing(mode, int(seed))  # type: ignore[arg-type]


def _steps(request: HttpRequest) -> tuple[int, int] | None:
    lo, hi = request.GET.get("steps_from", ""), request.GET.get("steps_to", "")
    if not lo and not hi:
        return None
    try:
        a, b = int(lo), int(hi)
    except ValueError:
        raise BadQueryError("steps_from", "steps_from and steps_to must both be integers") from None
    if a < 0 or b < a:
        raise BadQueryError("steps_from", f"need 0 ≤ steps_from ≤ steps_to (got {a}, {b})")
    return a, b


def _bad(exc: BadQueryError) -> JsonResponse:
    return JsonResponse({"error": str(exc), "field": exc.field}, status=400)


def _filename(run: Run, ext: str) -> str:
    return f"fabricmon-run-{run.pk}-{slugify(run.name)[:60] or 'run'}.{ext}"


@cache
def _static_text(path: str) -> str:
    """A static file's text, read once per process (plotly.min.js through the plotly finder)."""
    found = finders.find(path)
    if not found:
        raise FileNotFoundError(f"static file {path} not found (is the plotly package installed?)")
    return Path(str(found)).read_text(encoding="utf-8")


@access.logged_in
@require_GET
def run_report(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run's report as one HTML file that works offline: plotly.js, the charts' code and
    their data inline; no request to any server once saved."""
    run = _run(request, run_id)
    try:
        routing = _routing(request)
    except BadQueryError as exc:
        return _bad(exc)
    data = services.run_report(run, routing)
    routes = {"ports_csv": "reports:run-ports-csv", "ports_parquet": "reports:run-ports-parquet",
              "run": "jobs:run"}
    links = {k: request.build_absolute_uri(reverse(r, kwargs={"run_id": run.pk})) for k, r in routes.items()}
    html = render_to_string("reports/run_report.html", {
        **data, "links": links, "data": services.chart_data(data),
        "plotly_js": mark_safe(_static_text("vendor/plotly.min.js")),
        "report_js": mark_safe(_static_text("reports/report.js")),
        "report_css": mark_safe(_static_text("reports/report.css")),
    })
    resp = HttpResponse(html, content_type="text/html; charset=utf-8")
    resp["Content-Disposition"] = f'attachment; filename="{_filename(run, "html")}"'
    return resp


def _streamed(
    request: HttpRequest, chunks: Iterator[bytes], content_type: str, filename: str
) -> HttpResponse:
    """Chunks as they are made, in bounded memory. Under ASGI the body must be an async iterator:
    given a sync one, Django reads it all into a list first (its warning says so)."""
    body: Iterator[bytes] | AsyncIterator[bytes] = chunks
    if isinstance(request, ASGIRequest):
        body = _async(chunks)
    resp = StreamingHttpResponse(body, content_type=content_type)
    resp["Content-Disposition"] = f'attachment; filename="{filename}"'
    return resp


async def _async(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    step = sync_to_async(next, thread_sensitive=True)  # the ORM cursor stays on Django's sync thread
    while (part := await step(chunks, None)) is not None:
        yield part


def _export(request: HttpRequest, run_id: int) -> tuple[Run, Routing, tuple[int, int] | None] | HttpResponse:
    run = _run(request, run_id)
    try:
        routing, steps = _routing(request), _steps(request)
    except BadQueryError as exc:
        return _bad(exc)
    if not run.fabric:
        return JsonResponse({"error": "the run names no fabric: set it on the run page", "field": "fabric"},
                            status=422)
    if not Fabric.objects.filter(name=run.fabric).exists():
        return JsonResponse({"error": unknown_fabric(run.fabric), "field": "fabric"}, status=422)
    return run, routing, steps


@access.logged_in
@require_GET
def run_ports_csv(request: HttpRequest, run_id: int) -> HttpResponse:
    got = _export(request, run_id)
    if isinstance(got, HttpResponse):
        return got
    run, routing, steps = got
    chunks = exports.csv_chunks(exports.port_tables(run, routing, steps))
    return _streamed(request, chunks, "text/csv; charset=utf-8", _filename(run, "ports.csv"))


@access.logged_in
@require_GET
def run_ports_parquet(request: HttpRequest, run_id: int) -> HttpResponse:
    got = _export(request, run_id)
    if isinstance(got, HttpResponse):
        return got
    run, routing, steps = got
    meta = {"run": str(run.pk), "run_name": run.name, "fabric": run.fabric, "routing": routing.label(),
            "bytes": "projection of the run's traffic matrices onto its fabric"}
    chunks = exports.parquet_chunks(exports.port_tables(run, routing, steps), meta)
    return _streamed(request, chunks, "application/vnd.apache.parquet", _filename(run, "ports.parquet"))


def _run_param(request: HttpRequest, name: str) -> Run | None:
    raw = request.GET.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise BadQueryError(name, f"{name} must be a run id (an integer), got {raw[:40]!r}")
    return _run(request, int(raw))


@access.logged_in
@require_GET
def compare(request: HttpRequest) -> HttpResponse:
    """``?a=<run>&b=<run>``: both side by side; with one or none, the form to choose them."""
    try:
        a, b = _run_param(request, "a"), _run_param(request, "b")
        routing = _routing(request)
    except BadQueryError as exc:
        choices = access.runs_visible_to(request.user, Run.objects.all()).order_by("-started_at")[:200]
        page = {"error": str(exc), "choose": True, "choices": choices}
        return render(request, "reports/compare.html", page, status=400)
    ctx: dict[str, object] = {"a_id": a.pk if a else None, "b_id": b.pk if b else None}
    if a is None or b is None:
        ctx["choose"] = True
        ctx["choices"] = access.runs_visible_to(request.user, Run.objects.all()).order_by("-started_at")[:200]
        return render(request, "reports/compare.html", ctx)
    data = services.compare(a, b, routing)
    ctx.update(data)
    ctx["chart"] = {"a": services.chart_data(data["a"]), "b": services.chart_data(data["b"])}
    return render(request, "reports/compare.html", ctx)
