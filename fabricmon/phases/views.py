"""Phase-aligned heatmap page and its JSON API (thin shells over ``services``): a run's owner and
operators see them (``base.access.check_run``)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from fabricmon.base import access
from fabricmon.base.responses import json_response
from fabricmon.core.phases.routing import ROUTING_MODES, Routing
from fabricmon.jobs.models import Run
from fabricmon.phases import refresher, services, state
from fabricmon.phases.state import StepWindow
from fabricmon.topology.models import Fabric


def _routing(request: HttpRequest) -> Routing | None:
    mode = request.GET.get("routing", "pxn")
    if mode not in ROUTING_MODES:
        return None
    try:
        return Routing(mode, int(request.GET.get("seed", "0")))  # type: ignore[arg-type]
    except ValueError:
        return None


def _window(request: HttpRequest) -> StepWindow | None:
    """``steps_from``/``steps_to`` (inclusive): a page of history, at most MAX_WINDOW_STEPS
    reported steps; neither: the live window (the newest steps)."""
    lo, hi = request.GET.get("steps_from", ""), request.GET.get("steps_to", "")
    if not lo and not hi:
        return None
    try:
        a, b = int(lo), int(hi)
    except ValueError:
        raise ValueError("steps_from and steps_to must both be integers") from None
    return StepWindow.page(a, b)


def _max_rows(request: HttpRequest) -> int | None:
    """``max_ports``: how many ports the answer carries as rows (default: the setting)."""
    raw = request.GET.get("max_ports", "")
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if not 1 <= n <= state.MAX_ROWS_LIMIT:
        raise ValueError(f"max_ports must be an integer from 1 to {state.MAX_ROWS_LIMIT} (got {raw!r})")
    return n


@access.logged_in
def run_api(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.check_run(request.user, Run.objects.filter(pk=run_id).first())
    if run.fabric and not Fabric.objects.filter(name=run.fabric).exists():
        return JsonResponse({"error": state.unknown_fabric(run.fabric), "field": "fabric"}, status=422)
    routing = _routing(request)
    if routing is None:
        return JsonResponse(
            {
                "error": f"routing must be one of {', '.join(ROUTING_MODES)} (seed an integer)",
                "field": "routing",
            },
            status=400,
        )
    try:
        window = _window(request)
    except ValueError as exc:
        return JsonResponse({"error": str(exc), "field": "steps_from"}, status=400)
    try:
        max_rows = _max_rows(request)
    except ValueError as exc:
        return JsonResponse({"error": str(exc), "field": "max_ports"}, status=400)
    snap, current_ns = refresher.recent_or_now(run, routing, window)
    data = snap.as_dict(max_rows)
    data["state"] = run.state  # the page keeps polling while the run is running
    # a watched run is answered from its last computed views while only counter frames are newer
    # (at most FABRICMON_PHASES_MAX_STALE_S): when those were last known current
    data["current_at_ns"] = current_ns
    if request.GET.get("fold") == "1":
        rows = data.get("shown_ports")
        data["views"] = {k: services.fold_layers(v, rows) for k, v in data.get("views", {}).items()}
    return json_response(data)


@access.logged_in
def run_page(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.check_run(request.user, Run.objects.filter(pk=run_id).first())
    return render(request, "phases/run.html", {"run": run, "modes": ROUTING_MODES})
