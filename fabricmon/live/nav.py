"""The top bar's links, for every page (a template context processor).

What the bar shows follows what the user may see (``base.access``)::

    fabricmon  Fabric  Switches  Runs  Phases · <run>  Alerts            Admin  user  Log out
               └ viewers and above ┘      └ the page's run, else the user's latest running run
                                          (an operator without one: the fabric's latest running run)

A job owner (no role) gets Runs, their current run's phase view and their receivers; the fabric
and the alert list are not theirs. Admin is Django's admin, which keeps Django's own ``is_staff``
rule. At most three small queries a page (fabric names, the current run); none for anonymous users.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest

from fabricmon.base import access
from fabricmon.jobs.models import Run
from fabricmon.topology.models import Fabric

# url namespace (and, in the live app, url name) → the nav section it belongs to
_SECTIONS = {"jobs": "runs", "whatif": "runs", "phases": "phases", "alerts": "alerts", "admin": "admin"}
_LIVE_SECTIONS = {"switches": "switches"}


@dataclass(frozen=True)
class Nav:
    sees_fabric: bool  # viewers and above: the fabric heatmap, switches, the alert list
    fabric: str  # the fabric the Fabric / Switches links open ("" with none or several: the index)
    run: Any  # the run whose phase view the bar links (None: no current run)
    section: str  # the section of the page being shown: fabric, switches, runs, phases, alerts, admin


def _section(request: HttpRequest) -> str:
    match = getattr(request, "resolver_match", None)
    if match is None:
        return ""
    if match.namespace == "live":
        return _LIVE_SECTIONS.get(match.url_name or "", "fabric")
    return _SECTIONS.get(match.namespace, "")


def _fabric(request: HttpRequest) -> str:
    """The page's own fabric, else the only stored one (the usual case, and `make demo`)."""
    match = getattr(request, "resolver_match", None)
    if match is not None and "fabric" in match.kwargs:
        return str(match.kwargs["fabric"])
    names = list(Fabric.objects.order_by("name").values_list("name", flat=True)[:2])
    return names[0] if len(names) == 1 else ""


def current_run(user: Any) -> Run | None:
    """The user's latest running run; an operator without one: the latest running run of anyone."""
    running = Run.objects.filter(state=Run.State.RUNNING).order_by("-started_at")
    mine = running.filter(owner_id=user.pk).first()
    if mine is not None or not access.is_operator(user):
        return mine
    return running.first()


def _page_run(request: HttpRequest) -> Run | None:
    """The run a run page shows (its phase view is the one to link), if the user may see it."""
    match = getattr(request, "resolver_match", None)
    run_id = match.kwargs.get("run_id") if match is not None else None
    if run_id is None:
        return None
    run = Run.objects.filter(pk=run_id).first()
    return run if run is not None and access.can_see_run(request.user, run) else None


def nav(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    if not user.is_authenticated:
        return {"nav": None}
    sees_fabric = access.is_viewer(user)
    return {
        "nav": Nav(
            sees_fabric=sees_fabric,
            fabric=_fabric(request) if sees_fabric else "",
            run=_page_run(request) or current_run(user),
            section=_section(request),
        )
    }
