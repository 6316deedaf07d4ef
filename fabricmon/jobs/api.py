"""The ingest API (token-authenticated JSON/NDJSON over HTTP; schema in ``openapi.json``).

Views are thin: authenticate, check sizes, call ``services``, answer. Every 4xx carries
``{"error": reason, "field": name}`` (or per-line ``rejected`` entries for event batches).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.multipartparser import MultiPartParserError
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods

from collectors.traces.schema import PEER_LISTS, PHASES, SOURCES
from fabricmon.base import access, sockets
from fabricmon.jobs import (
    blocks,
    imports,
    ingest,
    matrices,
    matrix_parts,
    rank_maps,
    ratelimit,
    tasks,
    validation,
)
from fabricmon.jobs import runs as run_verbs
from fabricmon.jobs.models import Run, TraceUpload, TrafficMatrix
from fabricmon.jobs.tokens import authenticate_token
from fabricmon.jobs.validation import MAX_OFFSET_NS

# optional event fields a server before them ignored (unknown keys are ignored): a probe sends them
# only to a server that lists them here (GET /jobs/api/clock), so an older server loses nothing
EVENT_FIELDS = [key for key, _ in PEER_LISTS]
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")  # read-only: seeing the run is enough
MAX_BATCH_BYTES = settings.FABRICMON_INGEST_MAX_BYTES
MAX_BATCH_LINES = getattr(settings, "FABRICMON_INGEST_MAX_LINES", 100_000)
MAX_JSON_BYTES = settings.FABRICMON_API_MAX_JSON_BYTES
OPENAPI_PATH = Path(__file__).with_name("openapi.json")


def _error(status: int, reason: str, field: str = "") -> JsonResponse:
    return JsonResponse({"error": reason, "field": field}, status=status)


def _rate_limited(wait_s: float) -> JsonResponse:
    """429 with Retry-After (whole seconds, at least 1) and the limit in words."""
    rate, burst = ratelimit.limits()
    retry = max(1, math.ceil(wait_s))
    resp = JsonResponse(
        {
            "error": f"rate limit: at most {rate:g} requests/s per API token (bursts of {burst}); "
            f"retry in {retry} s",
            "field": "Authorization",
            "retry_after_s": retry,
        },
        status=429,
    )
    resp["Retry-After"] = str(retry)
    return resp


def token_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Bearer-token auth and the token's rate limit; a ``run_id`` URL argument is resolved to a run
    the token's user may see (and, for a method that writes, change)."""

    @csrf_exempt
    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, run_id: int | None = None, **kwargs: Any) -> HttpResponse:
        header = request.headers.get("Authorization", "")
        if not header:
            return _error(401, "missing API token: send 'Authorization: Bearer <token>'", "Authorization")
        scheme, _, token = header.partition(" ")
        row = authenticate_token(token.strip()) if scheme.lower() == "bearer" else None
        if row is None:
            return _error(401, "invalid or revoked API token", "Authorization")
        wait = ratelimit.take(f"{row.prefix}:{row.pk}")
        if wait > 0:
            return _rate_limited(wait)
        request.user = row.user
        if run_id is not None:
            # base.access decides, as for the pages: a run the token's user may not see is a 404
            # like a missing one; one they may see (an operator's) but not change is a 403.
            run = Run.objects.filter(pk=run_id).first()
            if run is None or not access.can_see_run(row.user, run):
                return _error(404, f"no run {run_id}", "run")
            if request.method not in SAFE_METHODS and not access.can_change_run(row.user, run):
                why = f"run {run_id} belongs to another user: only its owner or an admin changes it"
                return _error(403, why, "run")
            kwargs["run"] = run
        return view(request, *args, **kwargs)

    return wrapper


def _read_json(request: HttpRequest, empty: Any = None) -> Any:
    """The body as JSON (``empty`` for an empty body if given, else a 400)."""
    body = request.read(MAX_JSON_BYTES + 1)  # bounded even when no Content-Length was sent
    if len(body) > MAX_JSON_BYTES:
        raise validation.InputError("body", f"larger than {MAX_JSON_BYTES} bytes")
    if not body.strip():
        if empty is not None:
            return empty
        raise validation.InputError("body", "empty: send a JSON document")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise validation.InputError("body", f"invalid JSON: {exc}") from exc


def _run_json(run: Run) -> dict[str, Any]:
    return {
        "id": run.pk,
        "name": run.name,
        "owner": run.owner.get_username(),
        "tags": run.tags,
        "state": run.state,
        "fabric": run.fabric,
        "world_size": run.world_size,
        "started_at": run.started_at.isoformat(),
        "ended_at": run.ended_at.isoformat() if run.ended_at else None,
        "probe_dropped": run.probe_dropped_total,
    }


def _input_errors(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(*args, **kwargs)
        except validation.InputError as exc:
            return _error(exc.status, exc.reason, exc.field)

    return wrapper


# --- endpoints ----------------------------------------------------------------------------------


@csrf_exempt  # token-free and read-only: an unknown method is a 405, not a CSRF 403
@require_GET
def clock(request: HttpRequest) -> HttpResponse:
    """Server time for the probe's NTP-style offset exchange (no auth: it reveals only the time
    and which optional event fields this server reads, so a newer probe writes what it knows)."""
    return JsonResponse({"server_ns": time.time_ns(), "event_fields": EVENT_FIELDS})


@csrf_exempt
@require_GET
def openapi(request: HttpRequest) -> HttpResponse:
    return HttpResponse(OPENAPI_PATH.read_bytes(), content_type="application/json")


@token_required
@require_http_methods(["GET", "POST"])
@_input_errors
def runs(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        mine = Run.objects.filter(owner=request.user).select_related("owner")[:500]
        return JsonResponse({"runs": [_run_json(r) for r in mine]})
    body = _read_json(request)
    if not isinstance(body, dict):
        raise validation.InputError("body", "must be a JSON object")
    run = run_verbs.create_run(
        request.user, body.get("name"), body.get("tags", []), body.get("fabric", ""),
        body.get("world_size"), check_fabric=True,
    )
    return JsonResponse(_run_json(run), status=201)


@token_required
@require_http_methods(["GET"])
def run_detail(request: HttpRequest, run: Run) -> HttpResponse:
    return JsonResponse(_run_json(run) | {"rank_map": rank_maps.check(run)})


@token_required
@require_http_methods(["POST", "PUT"])
@_input_errors
def run_fabric(request: HttpRequest, run: Run) -> HttpResponse:
    """Set or correct the run's fabric: ``{"fabric": name}``; an unknown name is a 400 naming it and
    the fabrics the topology has. The answer carries the stored rank map's check on the new fabric."""
    body = _read_json(request)
    if not isinstance(body, dict):
        raise validation.InputError("body", "must be a JSON object: {\"fabric\": name}")
    run = run_verbs.set_fabric(run, body.get("fabric", ""))
    return JsonResponse(_run_json(run) | {"rank_map": rank_maps.check(run)})


@token_required
@require_http_methods(["POST", "PUT"])
@_input_errors
def run_tags(request: HttpRequest, run: Run) -> HttpResponse:
    body = _read_json(request)
    tags = body.get("tags") if isinstance(body, dict) else body
    return JsonResponse(_run_json(run_verbs.set_tags(run, tags)))


@token_required
@require_http_methods(["POST"])
@_input_errors
def run_end(request: HttpRequest, run: Run) -> HttpResponse:
    body = _read_json(request, empty={})
    state = body.get("state", Run.State.FINISHED) if isinstance(body, dict) else None
    return JsonResponse(_run_json(run_verbs.end_run(run, state)))


@token_required
@require_http_methods(["GET", "POST", "PUT"])
@_input_errors
def rank_map(request: HttpRequest, run: Run) -> HttpResponse:
    """POST: a JSON list of entries, or NDJSON (one entry per line), each placed on the run's
    fabric (an entry it cannot place is rejected, naming the host, NIC or port). GET: the stored
    map. Both answer with the map's ``check``: placed and missing ranks, unplaced entries and why."""
    if request.method == "GET":
        rows = list(run.ranks.all()[: settings.FABRICMON_MAX_RANKS])
        return JsonResponse({"ranks": [_rank_json(r) for r in rows], "check": rank_maps.check(run, rows)})
    if request.content_type == "application/x-ndjson":
        entries: list[Any] = []
        raw = request.read(MAX_JSON_BYTES + 1)
        if len(raw) > MAX_JSON_BYTES:
            raise validation.InputError("body", f"larger than {MAX_JSON_BYTES} bytes")
        if not raw.strip():
            raise validation.InputError("body", "empty: send one rank entry per line")
        for n, line in enumerate(raw.split(b"\n"), start=1):
            if line.strip():
                try:
                    entries.append(orjson.loads(line))
                except orjson.JSONDecodeError as exc:
                    return _error(400, f"line {n}: invalid JSON: {exc}", "body")
    else:
        entries = _read_json(request)
        if not isinstance(entries, list):
            raise validation.InputError("body", "must be a JSON list of rank entries")
    stored, errors = run_verbs.store_rank_map(run, entries)
    status = 200 if not errors else 422
    body = {"stored": stored, "rejected": [e.as_dict() for e in errors], "check": rank_maps.check(run)}
    return JsonResponse(body, status=status)


def _rank_json(row: Any) -> dict[str, Any]:
    return {"rank": row.rank, "host": row.host, "local_rank": row.local_rank, "gpu": row.gpu, "nic": row.nic,
            "switch": row.switch, "switch_port": row.switch_port, "source": row.source}


@token_required
@require_http_methods(["POST"])
@_input_errors
def rank_map_build(request: HttpRequest, run: Run) -> HttpResponse:
    """The rank-map helper: ``{"hosts": [...], "gpus_per_host": G, "first_rank": 0, "store": true}``
    → every rank on its host's GPU, NIC and rail-leaf port from the run's fabric (host i holds
    ranks i·G … i·G+G−1). Stored unless ``store`` is false; 422 naming each unknown host."""
    body = _read_json(request)
    if not isinstance(body, dict):
        raise validation.InputError("body", "must be a JSON object: {\"hosts\": [...], \"gpus_per_host\": G}")
    store = body.get("store", True)
    if not isinstance(store, bool):
        raise validation.InputError("store", f"must be true or false, got {validation.brief(store)}")
    entries, errors = rank_maps.build_rank_map(
        run, body.get("hosts"), body.get("gpus_per_host"), body.get("first_rank", 0)
    )
    stored, rejected = run_verbs.store_rank_map(run, entries, source="helper") if store else (0, [])
    answer = {
        "ranks": entries, "stored": stored, "rejected": [e.as_dict() for e in [*errors, *rejected]],
        "check": rank_maps.check(run) if store else None,
    }
    return JsonResponse(answer, status=422 if errors or rejected else 200)


@token_required
@require_http_methods(["GET", "POST"])
@_input_errors
def events(request: HttpRequest, run: Run) -> HttpResponse:
    """POST: an NDJSON batch (valid lines stored, bad ones listed; 422 if any was bad).
    GET: the run's events as NDJSON, streamed (optional ``source``, ``phase`` filters)."""
    if request.method == "GET":
        return _export_events(request, run)
    length = validation.query_int(request.META.get("CONTENT_LENGTH"), "Content-Length") or 0
    if length > MAX_BATCH_BYTES:
        return _error(413, f"batch of {length} bytes is larger than the limit of {MAX_BATCH_BYTES}", "body")
    offset = validation.query_int(
        request.headers.get("X-Clock-Offset-Ns"), "X-Clock-Offset-Ns", minimum=-MAX_OFFSET_NS,
        maximum=MAX_OFFSET_NS, empty_ok=False,
    ) or 0
    dropped = run_verbs.parse_probe_dropped(
        request.headers.get("X-Probe-Session"), request.headers.get("X-Probe-Dropped")
    )
    body = request.read(MAX_BATCH_BYTES + 1)
    if len(body) > MAX_BATCH_BYTES:
        return _error(413, f"batch larger than the limit of {MAX_BATCH_BYTES} bytes", "body")
    if not body.strip():  # (split, an empty body is one blank line: it answered 200 {"lines": 1})
        return _error(400, "empty batch: send one JSON event per line", "body")
    if dropped is not None:  # the poster's count of events lost before they got here
        run_verbs.note_probe_dropped(run, *dropped)
    result = ingest.ingest_ndjson(run, body, offset, MAX_BATCH_LINES)
    if result.stored:
        sockets.run_changed(run.pk)  # wake the run's phase sockets now, not at their next tick
    status = 200 if not result.rejected else (422 if result.lines else 400)
    if result.lines == 0:
        return _error(400, "empty batch: send one JSON event per line", "body")
    return JsonResponse(result.as_dict(), status=status)


def _export_events(request: HttpRequest, run: Run) -> HttpResponse:
    source, phase = request.GET.get("source"), request.GET.get("phase")
    for key, value, allowed in (("source", source, SOURCES), ("phase", phase, PHASES)):
        if value is not None and value not in allowed:  # (an empty filter too: it is no source)
            expected = ", ".join(allowed)
            return _error(400, f"unknown {key} {validation.brief(value)}; expected one of {expected}", key)
    # an async iterator: under ASGI Django streams it chunk by chunk (a sync one it collects first)
    lines = blocks.aiter_event_lines(run, source=source, phase=phase)
    return StreamingHttpResponse(lines, content_type="application/x-ndjson")


UPLOAD_MODES = ("auto", "inline", "queue")


GZIP_INLINE_RATIO = 30  # a gzip upload counts as this many times its size (JSON traces: 5-30x)


def inline_size(upload_file: Any, size: int) -> int:
    """What an inline import of the upload would read: its size, or for gzip the larger of its
    trailer's decompressed size (ISIZE, exact for honest files under 4 GiB) and its size × 30 —
    a 2.8 MB gzip of 1 GB JSON was imported inside the request (501 s of CPU) when the compressed
    size was compared; a forged trailer still leaves at most 1/30 of the inline limit compressed,
    which the importer's ratio cap bounds."""
    try:
        upload_file.seek(0)
        head = upload_file.read(2)
        if head != b"\x1f\x8b" or size < 18:
            return size
        upload_file.seek(size - 4)
        isize = int.from_bytes(upload_file.read(4), "little")
        return max(isize, size * GZIP_INLINE_RATIO)
    finally:
        upload_file.seek(0)


def import_inline(size: int, mode: str) -> bool:
    """Whether an upload is imported inside the request (``mode`` auto: up to
    ``FABRICMON_UPLOAD_INLINE_BYTES``) or queued for a worker."""
    if mode not in UPLOAD_MODES:
        raise validation.InputError("mode", f"must be one of {', '.join(UPLOAD_MODES)}")
    return mode == "inline" or (mode == "auto" and size <= settings.FABRICMON_UPLOAD_INLINE_BYTES)


def upload_status_url(upload: TraceUpload) -> str:
    return reverse("jobs:api-run-upload", kwargs={"run_id": upload.run_id, "upload_id": upload.pk})


@token_required
@require_http_methods(["GET", "POST"])
@_input_errors
def uploads(request: HttpRequest, run: Run) -> HttpResponse:
    """POST: a trace file as multipart field ``file`` (kind, rank and mode as form fields or
    query). Small files (or ``mode=inline``) are imported now: 200/422 with the counts. Larger
    ones (or ``mode=queue``) are saved and imported by a worker: 202 with the upload's status URL.
    GET: the run's uploads, newest first, with their progress."""
    if request.method == "GET":
        rows = run.uploads.order_by("-created_at")[:100]
        return JsonResponse({"uploads": [u.as_dict() | {"status_url": upload_status_url(u)} for u in rows]})
    try:
        params = request.POST if request.POST else request.GET
        upload_file = request.FILES.get("file")
    except MultiPartParserError as exc:
        raise validation.InputError("body", f"not a readable multipart/form-data body: {exc}") from exc
    kind = params.get("kind") or request.GET.get("kind", "")
    mode = params.get("mode") or request.GET.get("mode") or "auto"
    rank = validation.query_int(params.get("rank") or request.GET.get("rank"), "rank", maximum=MAX_RANK_FIELD)
    if upload_file is None:
        raise validation.InputError("file", "missing multipart file field 'file'")
    if kind not in imports.IMPORT_KINDS:  # the form's own values: 400 (the schema's enums)
        raise validation.InputError("kind", f"unknown trace kind {validation.brief(kind)}; expected one of "
                                            f"{', '.join(imports.IMPORT_KINDS)}")
    if mode not in UPLOAD_MODES:
        raise validation.InputError("mode", f"must be one of {', '.join(UPLOAD_MODES)}")
    try:
        return _upload(run, kind, mode, rank, upload_file)
    except validation.InputError as exc:  # a well-formed request this run cannot take, or its file
        return _error(422, exc.reason, exc.field)


MAX_RANK_FIELD = 65535  # the schema's bound on a rank field; the run's own world_size is checked after


def _upload(run: Run, kind: str, mode: str, rank: int | None, upload_file: Any) -> HttpResponse:
    if rank is not None and rank >= ingest.rank_limit(run):
        raise validation.InputError("rank", f"{rank} is not a rank of this run "
                                            f"({validation.rank_bound_text(ingest.rank_limit(run))})")
    size = upload_file.size or 0
    if not import_inline(inline_size(upload_file, size) if mode == "auto" else size, mode):
        try:
            upload = imports.queue_import(
                run, kind, upload_file, filename=upload_file.name or "", rank=rank, size_bytes=size,
                enqueue=tasks.enqueue_import,
            )
        except imports.ImportQueueUnavailableError as exc:
            response = _error(503, str(exc), "file")
            response["Retry-After"] = "30"
            return response
        return JsonResponse(upload.as_dict() | {"status_url": upload_status_url(upload)}, status=202)
    upload, result = imports.import_trace(
        run, kind, upload_file, filename=upload_file.name or "", rank=rank, size_bytes=size
    )
    body = {"upload": upload.pk, "state": upload.state, **result.as_dict(max_errors=100)}
    return JsonResponse(body, status=200 if not result.rejected else 422)


@token_required
@require_GET
def upload_detail(request: HttpRequest, run: Run, upload_id: int) -> HttpResponse:
    """One upload's progress: state, bytes read of size, events stored/duplicate/rejected, error."""
    upload = TraceUpload.objects.filter(pk=upload_id, run=run).first()
    if upload is None:
        return _error(404, f"no upload {upload_id} in run {run.pk}", "upload")
    return JsonResponse(upload.as_dict() | {"status_url": upload_status_url(upload)})


@token_required
@require_GET
@_input_errors
def matrix(request: HttpRequest, run: Run) -> HttpResponse:
    """The traffic matrix of one (step, layer, phase) — or summed over steps when step is omitted."""
    source = request.GET.get("source", "probe")
    if source not in SOURCES:
        raise validation.InputError("source", f"unknown source {validation.brief(source)}")
    matrix_parts.settle(run)
    qs = TrafficMatrix.objects.filter(run=run, source=source)
    for key, most in (("layer", validation.MAX_LAYER), ("step", validation.INT64_MAX)):
        value = validation.query_int(request.GET.get(key), key, minimum=-1, maximum=most, empty_ok=False)
        if value is not None:
            qs = qs.filter(**{key: value})
    phase = request.GET.get("phase")
    if phase is not None:  # given empty is not "every phase": the schema's enum has no ""
        if phase not in PHASES:
            raise validation.InputError("phase", f"unknown phase {validation.brief(phase)}")
        qs = qs.filter(phase=phase)
    sent, received = matrices.sum_matrices(list(qs))
    return JsonResponse({"n_ranks": len(sent), "sent": sent, "received": received, "matrices": qs.count()})
