"""Job owners' pages: list and create runs, API tokens, a run's tags, rank-map and trace uploads,
its timeline (steps, layers, phases) and its traffic matrix per (layer, phase).

Session-authenticated (login + CSRF); the machine API is ``api.py``. The JSON endpoints here
feed plotly.js on the run page.
"""

from __future__ import annotations

import orjson
from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from fabricmon.base import access
from fabricmon.jobs import blocks, imports, ingest, matrices, matrix_parts, rank_maps, tasks, validation
from fabricmon.jobs import runs as run_verbs
from fabricmon.jobs.api import import_inline, inline_size
from fabricmon.jobs.models import PHASES, ApiToken, Run, TraceUpload, TrafficMatrix
from fabricmon.jobs.timeline import DEFAULT_BUCKETS, DEFAULT_ROWS, TimelineQuery, ranks_by_time
from fabricmon.jobs.tokens import issue_token, revoke_token
from fabricmon.topology.models import Fabric

MATRIX_STEPS = 64  # the run page's matrix: summed over at most this many (the newest) steps


def _own_run(request: HttpRequest, run_id: int, *, change: bool = False) -> Run:
    """The run if the user may see it (and change it): 404 if not seen, 403 if seen only."""
    run: Run = access.check_run(request.user, Run.objects.filter(pk=run_id).first(), change=change)
    return run


def _tags(text: str) -> list[str]:
    return [t.strip() for t in text.replace("\n", ",").split(",") if t.strip()]


@access.logged_in
def run_list(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        try:
            run = run_verbs.create_run(
                request.user,
                request.POST.get("name", ""),
                _tags(request.POST.get("tags", "")),
                request.POST.get("fabric", "").strip(),
                check_fabric=True,
            )
        except validation.InputError as exc:
            messages.error(request, str(exc))
            return redirect("jobs:runs")
        return redirect("jobs:run", run_id=run.pk)
    # a job owner's own runs; an operator's list is every run (they may see them all)
    runs = access.runs_visible_to(request.user, Run.objects.select_related("owner"))
    runs = runs.order_by("-started_at")[:200]
    tokens = ApiToken.objects.filter(user=request.user, revoked_at__isnull=True).order_by("-created_at")
    return render(
        request,
        "jobs/runs.html",
        {
            "runs": runs,
            "all_runs": access.is_operator(request.user),
            "tokens": tokens,
            "new_token": request.session.pop("jobs_new_token", None),
            "fabrics": _fabric_names(),
        },
    )


def _fabric_names() -> list[str]:
    return list(Fabric.objects.order_by("name").values_list("name", flat=True)[:200])


@access.logged_in
@require_POST
def token_create(request: HttpRequest) -> HttpResponse:
    _, token = issue_token(request.user, request.POST.get("name", "")[:100])
    request.session["jobs_new_token"] = token  # shown once on the next page, then gone
    return redirect("jobs:runs")


@access.logged_in
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    row = ApiToken.objects.filter(pk=token_id, user=request.user).first()
    if row is not None:
        revoke_token(row)
    return redirect("jobs:runs")


def matrix_menu(keys: list[tuple[str, int, str]]) -> list[dict[str, object]]:
    """The run page's matrix choices in reading order: per source, the MoE layers in order (each
    phase in the job's order: dispatch, combine, their backward twins, …), events without a layer
    (-1, "other") last; the first layer's dispatch is the one shown first."""
    rank = {p: i for i, p in enumerate(PHASES)}

    def order(k: tuple[str, int, str]) -> tuple[object, ...]:
        source, layer, phase = k
        return (source != "probe", source, layer < 0, layer, rank.get(phase, len(rank)), phase)

    ordered = sorted(keys, key=order)
    first = next((k for k in ordered if k[1] >= 0 and k[2] == "dispatch"), None)
    first = first or next((k for k in ordered if k[1] >= 0), ordered[0] if ordered else None)
    return [{"source": k[0], "layer": k[1], "phase": k[2], "selected": k == first} for k in ordered]


@access.logged_in
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _own_run(request, run_id, change=request.method == "POST")
    if request.method == "POST":
        try:
            run_verbs.set_tags(run, _tags(request.POST.get("tags", "")))
        except validation.InputError as exc:
            messages.error(request, str(exc))
        return redirect("jobs:run", run_id=run.pk)
    keys = (
        TrafficMatrix.objects.filter(run=run)
        .values_list("source", "layer", "phase")
        .distinct()
        .order_by("source", "layer", "phase")  # no Meta ordering column in the DISTINCT
    )
    ranks = list(run.ranks.all()[: settings.FABRICMON_MAX_RANKS])
    return render(
        request,
        "jobs/run.html",
        {
            "run": run,
            "can_change": access.can_change_run(request.user, run),
            "ranks": ranks,
            "rank_check": rank_maps.check(run, ranks),
            "fabrics": _fabric_names(),
            "uploads": run.uploads.order_by("-created_at")[:20],
            "matrix_keys": matrix_menu(list(keys)),
            "event_count": blocks.event_count(run),
            "budget_mb": settings.FABRICMON_RUN_BUDGET_MB,
        },
    )


@access.logged_in
@require_POST
def run_fabric(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run page's fabric form: set or correct the run's fabric (owner or admin)."""
    run = _own_run(request, run_id, change=True)
    try:
        run_verbs.set_fabric(run, request.POST.get("fabric", "").strip())
    except validation.InputError as exc:
        messages.error(request, f"fabric: {exc.reason}")
    else:
        messages.success(request, f"fabric set to {run.fabric}: {rank_maps.check(run)['summary']}")
    return redirect("jobs:run", run_id=run.pk)


@access.logged_in
@require_POST
def run_rank_map_build(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run page's rank-map helper: the job's hosts in rank order and GPUs per host → the map,
    placed on the run's fabric and stored (owner or admin)."""
    run = _own_run(request, run_id, change=True)
    try:
        per_host = validation.query_int(request.POST.get("gpus_per_host"), "gpus_per_host", minimum=1,
                                        maximum=settings.FABRICMON_MAX_RANKS)
        entries, errors = rank_maps.build_rank_map(run, request.POST.get("hosts", ""), per_host)
    except validation.InputError as exc:
        messages.error(request, f"rank map: {exc.field}: {exc.reason}")
        return redirect("jobs:run", run_id=run.pk)
    stored, rejected = run_verbs.store_rank_map(run, entries, source="helper")
    for e in [*errors, *rejected][:20]:
        messages.error(request, f"rank map: {e.reason}")
    summary = rank_maps.check(run)["summary"]
    messages.info(request, f"rank map: {stored} ranks stored from the topology · {summary}")
    return redirect("jobs:run", run_id=run.pk)


@access.logged_in
@require_POST
def run_upload(request: HttpRequest, run_id: int) -> HttpResponse:
    """Rank map (JSON list) or trace file from the page's XHR upload (progress shown client-side)."""
    run = _own_run(request, run_id, change=True)
    upload = request.FILES.get("file")
    kind = request.POST.get("kind", "")
    if upload is None:
        return JsonResponse({"error": "choose a file", "field": "file"}, status=400)
    try:
        if kind == "rankmap":
            try:
                entries = orjson.loads(upload.read())
            except orjson.JSONDecodeError as exc:
                raise validation.InputError("file", f"rank map is not valid JSON: {exc}") from exc
            if not isinstance(entries, list):
                raise validation.InputError("file", "rank map must be a JSON list of entries")
            stored, errors = run_verbs.store_rank_map(run, entries)
            return JsonResponse(
                {"stored": stored, "rejected": [e.as_dict() for e in errors], "check": rank_maps.check(run)},
                status=422 if errors else 200,
            )
        rank = validation.query_int(request.POST.get("rank"), "rank", maximum=ingest.rank_limit(run) - 1)
        size = upload.size or 0
        mode = request.POST.get("mode") or "auto"
        if not import_inline(inline_size(upload, size) if mode == "auto" else size, mode):
            row = imports.queue_import(
                run, kind, upload, filename=upload.name or "", rank=rank, size_bytes=size,
                enqueue=tasks.enqueue_import,
            )
            status_url = reverse("jobs:run-upload-status", kwargs={"run_id": run.pk, "upload_id": row.pk})
            return JsonResponse(row.as_dict() | {"status_url": status_url}, status=202)
        row, result = imports.import_trace(
            run, kind, upload, filename=upload.name or "", rank=rank, size_bytes=size
        )
    except validation.InputError as exc:
        return JsonResponse({"error": exc.reason, "field": exc.field}, status=400)
    body = {"upload": row.pk, "state": row.state, **result.as_dict(max_errors=50)}
    return JsonResponse(body, status=422 if result.rejected else 200)


@access.logged_in
@require_GET
def run_upload_status(request: HttpRequest, run_id: int, upload_id: int) -> HttpResponse:
    """One upload's import progress, polled by the run page after a queued upload."""
    run = _own_run(request, run_id)
    row = TraceUpload.objects.filter(pk=upload_id, run=run).first()
    if row is None:
        raise Http404("no such upload")
    return JsonResponse(row.as_dict())


@access.logged_in
@require_GET
def run_timeline(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run's ranks × time, aggregated on the server (``jobs.timeline``): bounded by the asked
    buckets and rows, whatever the run holds; exact events when the span holds few."""
    run = _own_run(request, run_id)
    try:
        buckets, rows = _opt_int(request, "buckets"), _opt_int(request, "rows")
        query = TimelineQuery(
            t1_ns=_opt_int(request, "t1_ns"), t2_ns=_opt_int(request, "t2_ns"),
            buckets=DEFAULT_BUCKETS if buckets is None else buckets,
            max_rows=DEFAULT_ROWS if rows is None else rows,
            source=request.GET.get("source") or None,
        )
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return HttpResponse(orjson.dumps(ranks_by_time(run, query)), content_type="application/json")


def _opt_int(request: HttpRequest, name: str) -> int | None:
    raw = request.GET.get(name, "")
    if raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw[:40]!r}") from None


@access.logged_in
@require_GET
def run_matrix(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _own_run(request, run_id)
    matrix_parts.settle(run)
    qs = TrafficMatrix.objects.filter(
        run=run, source=request.GET.get("source", "probe"), phase=request.GET.get("phase", "dispatch")
    )
    try:
        layer, step = (validation.query_int(request.GET.get(k), k, minimum=-1) for k in ("layer", "step"))
    except validation.InputError as exc:
        return JsonResponse({"error": exc.reason, "field": exc.field}, status=400)
    if layer is not None:
        qs = qs.filter(layer=layer)
    if step is not None:
        qs = qs.filter(step=step)
    # A long run holds one matrix per step: sum the newest MATRIX_STEPS, never the whole history.
    steps = qs.count()
    sent, received = matrices.sum_matrices(list(qs.order_by("-step")[:MATRIX_STEPS]))
    return JsonResponse({"sent": sent, "received": received, "steps": min(steps, MATRIX_STEPS),
                         "steps_total": steps})
