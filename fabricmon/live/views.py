"""Pages of the live dashboard (login + the viewer role or above) and the JSON they fetch.

The fabric heatmap itself streams over the WebSocket (consumers.py); these views serve the page
shells, the row layout (once per topology version), one port's series and switch health.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.staticfiles.views import serve
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import condition

from fabricmon.base import access
from fabricmon.base.connections import connect
from fabricmon.jobs.models import Run
from fabricmon.live import services
from fabricmon.phases import markers

View = Callable[..., HttpResponse]


def _redis() -> Any:
    return connect()


@access.logged_in
def index(request: HttpRequest) -> HttpResponse:
    """The landing page (``/``, and where the login form sends): the fabric for viewers and
    above, a job owner's own runs for anyone else (the fabric is not theirs to see)."""
    if not access.is_viewer(request.user):
        return redirect("jobs:runs")
    stored, live_only = services.known_fabrics(_redis())
    if len(stored) == 1:  # the usual case (and `make demo`): straight to the heatmap
        return redirect("live:fabric", fabric=stored[0])
    return render(request, "live/index.html", {"fabrics": stored, "live_only": live_only})


@access.viewer_required
def fabric(request: HttpRequest, fabric: str) -> HttpResponse:
    return render(request, "live/fabric.html", {"fabric": fabric})


def _layout_etag(request: HttpRequest, fabric: str) -> str | None:
    layout = services.layout_for(fabric)
    return layout["topology_version"] if layout else None


@access.viewer_required
@condition(etag_func=_layout_etag)
def layout_json(request: HttpRequest, fabric: str) -> HttpResponse:
    layout = services.layout_for(fabric)
    if layout is None:
        return JsonResponse({"error": f"fabric {fabric!r} is not in the topology database"}, status=404)
    return JsonResponse(layout)


@access.viewer_required
def port(request: HttpRequest, fabric: str, position: int) -> HttpResponse:
    layout = services.layout_for(fabric)
    info: dict[str, Any] = {"position": position}
    if layout is not None:
        if position >= layout["n_ports"]:
            raise Http404(f"fabric {fabric!r} has {layout['n_ports']} ports")
        p = layout["ports"]
        info |= {
            "switch": layout["switches"][p["switch"][position]],
            "name": p["name"][position],
            "ifindex": p["ifindex"][position],
            "speed_gbps": p["speed_bps"][position] / 1e9,
            "speed_bps": int(p["speed_bps"][position]),
            "peer": p["peer"][position],
            "facing": "host-facing" if p["host_facing"][position] else "fabric-facing",
        }
    return render(request, "live/port.html", {"fabric": fabric, "port": info})


@access.viewer_required
def port_json(request: HttpRequest, fabric: str, position: int) -> HttpResponse:
    try:
        window_s = services.window_seconds(request.GET.get("window_s"))
    except ValueError as exc:
        return JsonResponse({"error": str(exc), "field": "window_s"}, status=400)
    r = _redis()
    data = services.port_series(r, fabric, position, window_s)
    switch = request.GET.get("switch")
    data["health"] = services.switch_health(r, fabric, [switch])[0] if switch else None
    return JsonResponse(data)


@access.viewer_required
def switches(request: HttpRequest, fabric: str) -> HttpResponse:
    return render(request, "live/switches.html", {"fabric": fabric})


@access.viewer_required
def health_json(request: HttpRequest, fabric: str) -> HttpResponse:
    layout = services.layout_for(fabric)
    names = layout["switches"] if layout else []
    r = _redis()
    return JsonResponse({
        "switches": services.switch_health(r, fabric, names),
        "newest_frame_age_s": services.newest_frame_age_s(r, fabric),
    })


def static(request: HttpRequest, path: str) -> HttpResponse:
    """Static files from the finders, so ``daphne`` alone serves a working dashboard (a deployment
    behind a web server would ``collectstatic`` and serve STATIC_ROOT there instead). Public: the
    login page needs its style sheet, and nothing here is private."""
    return serve(request, path, insecure=True)


@access.viewer_required
def runs_json(request: HttpRequest, fabric: str) -> HttpResponse:
    """Runs of this fabric that are active or recent: the run selector beside the heatmap."""
    runs = markers.fabric_runs(fabric)
    if not access.is_operator(request.user):  # a viewer's selector lists only their own runs
        visible = access.runs_visible_to(request.user, Run.objects.filter(fabric=fabric))
        mine = set(visible.values_list("pk", flat=True))
        runs = [r for r in runs if r["id"] in mine]
    return JsonResponse({"runs": runs})


@access.viewer_required
def markers_json(request: HttpRequest, fabric: str, run_id: int) -> HttpResponse:
    """Phase markers of one run for the heatmap's time axis, from ``since_ns`` on (the browser
    passes its window start, then the newest marker it holds minus a look-back)."""
    run = access.check_run(request.user, Run.objects.filter(pk=run_id).first())
    if run.fabric != fabric:
        raise Http404(f"no run {run_id} on fabric {fabric!r}")
    try:
        since_ns = int(request.GET.get("since_ns", "0"))
    except ValueError:
        return JsonResponse(
            {"error": "since_ns must be an integer (Unix-epoch ns)", "field": "since_ns"}, status=400
        )
    return JsonResponse(markers.phase_markers(run, since_ns))
