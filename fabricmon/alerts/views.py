"""Alert pages: list, episode detail (trajectory over the port × time grid), silence and
acknowledge, receivers (with "send test") and rules. Views only read and call services."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from fabricmon.alerts import delivery, services
from fabricmon.alerts.forms import ReceiverForm, RuleForm, SilenceForm
from fabricmon.alerts.models import Alert, Episode, Receiver, Rule, Silence
from fabricmon.base import access


@login_required
def alert_list(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "")
    alerts = Alert.objects.select_related("episode", "acknowledged_by").exclude(state=Alert.State.INACTIVE)
    if state:
        alerts = alerts.filter(state=state)
    return render(
        request,
        "alerts/list.html",
        {
            "alerts": alerts[:200],
            "state": state,
            "silences": Silence.objects.all()[:50],
            "silence_form": SilenceForm(),
            "episodes": Episode.objects.all()[:20],
        },
    )


def trajectory_grid(episode: Episode) -> dict[str, object]:
    """Rows = ports the hot set visited (first visit order), columns = trajectory steps."""
    rows: list[str] = []
    for step in episode.trajectory:
        for p in step["ports"]:
            if p not in rows:
                rows.append(p)
    cells = [(c, rows.index(p)) for c, step in enumerate(episode.trajectory) for p in step["ports"]]
    path = [(c, rows.index(step["ports"][0])) for c, step in enumerate(episode.trajectory) if step["ports"]]
    return {
        "rows": rows,
        "cols": len(episode.trajectory),
        "cells": cells,
        "path": " ".join(f"{c * 24 + 12},{r * 18 + 9}" for c, r in path),
        "width": max(len(episode.trajectory), 1) * 24,
        "height": max(len(rows), 1) * 18,
    }


@login_required
def episode_detail(request: HttpRequest, pk: int) -> HttpResponse:
    episode = get_object_or_404(Episode, pk=pk)
    alerts = episode.alerts.prefetch_related("transitions")
    return render(
        request,
        "alerts/episode.html",
        {"episode": episode, "alerts": alerts, "grid": trajectory_grid(episode)},
    )


@login_required
@require_POST
def acknowledge(request: HttpRequest, pk: int) -> HttpResponse:
    services.acknowledge(get_object_or_404(Alert, pk=pk), request.user)
    return redirect(request.POST.get("next") or "alerts:list")


@login_required
@require_POST
def create_silence(request: HttpRequest) -> HttpResponse:
    form = SilenceForm(request.POST)
    if form.is_valid():
        services.silence(user=request.user, **form.cleaned_data)
        messages.success(request, "Silence created.")
    else:
        messages.error(request, f"Silence not created: {form.errors.as_text()}")
    return redirect("alerts:list")


@login_required
def receivers(request: HttpRequest) -> HttpResponse:
    form = ReceiverForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        rcv = form.save(commit=False)
        rcv.owner = None if access.is_staff(request.user) else request.user  # job owners route their own runs
        rcv.save()
        return redirect("alerts:receivers")
    staff = access.is_staff(request.user)
    visible = Receiver.objects.all() if staff else Receiver.objects.filter(owner=request.user)
    return render(request, "alerts/receivers.html", {"receivers": visible, "form": form})


@login_required
@require_POST
def send_test(request: HttpRequest, pk: int) -> HttpResponse:
    rcv = get_object_or_404(Receiver, pk=pk)
    if not access.is_staff(request.user) and rcv.owner_id != request.user.pk:
        return HttpResponse("not your receiver", status=403)
    error = delivery.send_test(rcv)
    if error:
        messages.error(request, f"Test to {rcv.name} failed: {error}")
    else:
        messages.success(request, f"Test sent to {rcv.name}.")
    return redirect("alerts:receivers")


@login_required
def rules(request: HttpRequest) -> HttpResponse:
    form = RuleForm(request.POST or None)
    if request.method == "POST":
        if not access.is_staff(request.user):
            return HttpResponse("only staff manage rules", status=403)
        if form.is_valid():
            form.save()
            return redirect("alerts:rules")
    return render(request, "alerts/rules.html", {"rules": Rule.objects.all(), "form": form})
