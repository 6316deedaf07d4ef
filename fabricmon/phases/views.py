"""Phase-aligned heatmap page and its JSON API (thin shells over ``services``)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render

from fabricmon.base import access
from fabricmon.core.phases.routing import ROUTING_MODES, Routing
from fabricmon.jobs.models import Run
from fabricmon.phases import services


def _routing(request: HttpRequest) -> Routing | None:
    mode = request.GET.get("routing", "pxn")
    if mode not in ROUTING_MODES:
        return None
    try:
        return Routing(mode, int(request.GET.get("seed", "0")))  # type: ignore[arg-type]
    except ValueError:
        return None


@login_required
def run_api(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    if not access.can_see_phase_views(request.user, run):
        raise Http404("no such run")
    routing = _routing(request)
    if routing is None:
        return JsonResponse(
            {
                "error": f"routing must be one of {', '.join(ROUTING_MODES)} (seed an integer)",
                "field": "routing",
            },
            status=400,
        )
    data = services.phase_views(run, routing)
    data["state"] = run.state  # the page keeps polling while the run is running
    if request.GET.get("fold") == "1":
        data["views"] = {k: services.fold_layers(v) for k, v in data.get("views", {}).items()}
    return JsonResponse(data, status=200)


@login_required
def run_page(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    if not access.can_see_phase_views(request.user, run):
        raise Http404("no such run")
    return render(request, "phases/run.html", {"run": run, "modes": ROUTING_MODES})
