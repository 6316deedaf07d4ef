"""Alert pages: list, episode detail (trajectory over the port × time grid), silence and
acknowledge, receivers (with "send test") and rules. Views only read and call services.

Access (``base.access``): viewers read alerts, episodes and rules; operators silence and
acknowledge; admins change rules and fabric-wide receivers; any logged-in job owner keeps
receivers of their own (routing their runs' alerts), seen and tested only by them and admins.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from fabricmon.alerts import delivery, services
from fabricmon.alerts.forms import ReceiverForm, RuleForm, SilenceForm
from fabricmon.alerts.models import Alert, AlertTransition, Episode, Receiver, Rule, Silence
from fabricmon.base import access


@access.viewer_required
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
            "may_act": access.is_operator(request.user),
        },
    )


TRAJECTORY_PAGE = 50  # trajectory steps drawn per page of an episode
TRANSITIONS_PAGE = 50  # state changes listed per page
ALERTS_PAGE = 20  # alerts listed per page (a moving hot set may have visited hundreds of ports)


def trajectory_grid(steps: list[dict[str, Any]], first: int = 0) -> dict[str, object]:
    """Rows = ports the hot set visited in these steps (first visit order), columns = the steps."""
    rows: list[str] = []
    for step in steps:
        for p in step["ports"]:
            if p not in rows:
                rows.append(p)
    cells = [(c, rows.index(p)) for c, step in enumerate(steps) for p in step["ports"]]
    path = [(c, rows.index(step["ports"][0])) for c, step in enumerate(steps) if step["ports"]]
    return {
        "rows": rows,
        "cols": len(steps),
        "first": first,
        "cells": cells,
        "path": " ".join(f"{c * 24 + 12},{r * 18 + 9}" for c, r in path),
        "width": max(len(steps), 1) * 24,
        "height": max(len(rows), 1) * 18,
    }


def _page(request: HttpRequest, name: str, items: Any, per_page: int) -> Any:
    """One page of ``items`` (newest first where the caller ordered so); a bad number is page 1."""
    return Paginator(items, per_page).get_page(request.GET.get(name))


@access.viewer_required
def episode_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One episode, every part paged: the trajectory (newest steps first), its alerts and their
    state changes — so a day-long episode answers as fast as a minute-long one."""
    episode = get_object_or_404(Episode, pk=pk)
    steps = list(reversed(episode.trajectory))  # newest first: what an operator looks at
    traj = _page(request, "steps", steps, TRAJECTORY_PAGE)
    page_steps = list(reversed(traj.object_list))  # drawn in time order
    alerts = _page(request, "alerts", episode.alerts.order_by("-fired_at", "-pk"), ALERTS_PAGE)
    transitions = _page(
        request, "changes",
        AlertTransition.objects.filter(alert__episode=episode).select_related("alert").order_by("-at", "-pk"),
        TRANSITIONS_PAGE,
    )
    first = len(steps) - traj.start_index() - len(page_steps) + 1 if page_steps else 0
    return render(
        request,
        "alerts/episode.html",
        {
            "episode": episode, "traj": traj, "steps": page_steps, "grid": trajectory_grid(page_steps, first),
            "alerts": alerts, "transitions": transitions,
        },
    )


@access.operator_required
@require_POST
def acknowledge(request: HttpRequest, pk: int) -> HttpResponse:
    services.acknowledge(get_object_or_404(Alert, pk=pk), request.user)
    return redirect(request.POST.get("next") or "alerts:list")


@access.operator_required
@require_POST
def create_silence(request: HttpRequest) -> HttpResponse:
    form = SilenceForm(request.POST)
    if form.is_valid():
        services.silence(user=request.user, **form.cleaned_data)
        messages.success(request, "Silence created.")
    else:
        messages.error(request, f"Silence not created: {form.errors.as_text()}")
    return redirect("alerts:list")


@access.logged_in
def receivers(request: HttpRequest) -> HttpResponse:
    form = ReceiverForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        rcv = form.save(commit=False)
        # an admin's receiver is fabric-wide; anyone else's routes their own runs' alerts
        rcv.owner = None if access.is_admin(request.user) else request.user
        rcv.save()
        return redirect("alerts:receivers")
    visible = access.receivers_visible_to(request.user, Receiver.objects.all())
    return render(
        request,
        "alerts/receivers.html",
        {"receivers": visible, "form": form, "fabric_wide": access.is_admin(request.user)},
    )


@access.logged_in
@require_POST
def send_test(request: HttpRequest, pk: int) -> HttpResponse:
    rcv = get_object_or_404(Receiver, pk=pk)
    if not access.can_manage_receiver(request.user, rcv):
        raise PermissionDenied("a receiver is tested by its owner or an admin")
    error = delivery.send_test(rcv)
    if error:
        messages.error(request, f"Test to {rcv.name} failed: {error}")
    else:
        messages.success(request, f"Test sent to {rcv.name}.")
    return redirect("alerts:receivers")


@access.viewer_required
def rules(request: HttpRequest) -> HttpResponse:
    form = RuleForm(request.POST or None)
    if request.method == "POST":
        access.require_role(request.user, access.Role.ADMIN)
        if form.is_valid():
            form.save()
            return redirect("alerts:rules")
    return render(
        request, "alerts/rules.html",
        {"rules": Rule.objects.all(), "form": form, "may_change": access.is_admin(request.user)},
    )
