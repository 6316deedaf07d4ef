"""The What-if page, its JSON and the fabric's scheduler exports (thin shells over ``services``)."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render

from fabricmon.base import access
from fabricmon.jobs.models import Run
from fabricmon.whatif import presenter, services
from fabricmon.whatif.params import ParamError, params_from


def _run(request: HttpRequest, run_id: int) -> Run:
    run = get_object_or_404(Run, pk=run_id)
    if not access.can_see_run(request.user, run):
        raise Http404("no such run")
    return run


@login_required
def run_api(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(request, run_id)
    try:
        params = params_from(request.GET)
    except ParamError as exc:
        return JsonResponse({"error": str(exc), "field": exc.field}, status=400)
    try:
        return JsonResponse(services.run_whatif(run, params))
    except services.WhatIfError as exc:
        return JsonResponse({"error": str(exc)}, status=409)


@login_required
def run_page(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run(request, run_id)
    ctx: dict[str, object] = {"run": run, "query": request.GET, "exports": services.EXPORTS}
    try:
        data = services.run_whatif(run, params_from(request.GET))
        ctx["data"] = data
        ctx["figures"] = [{**f, "rows": presenter.rows(f)} for f in data["figures"]]
        ctx["raw"] = {f["name"]: json.dumps(f["values"] if f["values"] is not None else f["always"], indent=1)
                      for f in data["figures"]}
    except ParamError as exc:
        ctx["error"] = str(exc)
        return render(request, "whatif/run.html", ctx, status=400)
    except services.WhatIfError as exc:
        ctx["error"] = str(exc)
    return render(request, "whatif/run.html", ctx)


@login_required
def export(request: HttpRequest, run_id: int, kind: str) -> HttpResponse:
    run = _run(request, run_id)
    if not run.fabric:
        raise Http404("the run names no fabric")
    try:
        content_type, body = services.exports(run.fabric, kind)
    except KeyError:
        raise Http404(f"no export {kind!r}; one of {', '.join(services.EXPORTS)}") from None
    resp = HttpResponse(body, content_type=f"{content_type}; charset=utf-8")
    resp["Content-Disposition"] = f'inline; filename="{run.fabric}-{kind}"'
    return resp
