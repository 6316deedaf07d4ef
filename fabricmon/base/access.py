"""Who may see and do what: the one place every view, JSON API and socket asks.

Roles are auth groups (``live/migrations/0001_roles.py``, ``0002_viewers.py``), each including the
one below it; a superuser has every role::

    (no role)   a logged-in job owner: their own runs, API tokens and receivers
    viewers     + the fabric (heatmap, ports, switches) and the alerts, episodes and rules, read-only
    operators   + every run, read-only; silence and acknowledge alerts
    admins      + change every run; create and change rules and fabric-wide receivers
    superuser   everything (and the Django admin, which keeps Django's own is_staff rule)

A run (page, timeline, matrix, events export, uploads, rank map, tags, phase views, phase socket,
its markers on the heatmap) is seen by its owner and by operators, changed by its owner and by
admins. A run someone may not see answers **404** (pages, JSON, API) or closes its socket with
4404, exactly as a run that does not exist, so ids cannot be probed; a run they may see but not
change answers **403** with the reason, as does every other refusal of a logged-in user. Pages
refuse an anonymous user with the login redirect, sockets with 4401 (accepted first, so the
browser gets the code and the page can redirect), a missing role with 4403. The ingest API
authenticates by token (``jobs/api.token_required``) and asks the same run predicates.

Views use the decorators and ``check_run``; consumers use ``socket_refusal`` and
``run_socket_refusal`` (through ``database_sync_to_async``).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from fabricmon.base.sockets import CLOSE_FORBIDDEN, CLOSE_NO_SUCH_RUN, CLOSE_UNAUTHENTICATED

User = AbstractBaseUser | AnonymousUser
View = Callable[..., HttpResponse]


class Role(IntEnum):
    """Ordered: each role can do everything the ones below it can."""

    NONE = 0
    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3
    SUPERUSER = 4


# Group name → role; the migrations create these groups.
ROLE_GROUPS = {"viewers": Role.VIEWER, "operators": Role.OPERATOR, "admins": Role.ADMIN}
_CACHE = "_fabricmon_role"  # the role, kept on the user object for the rest of its request

REASONS = {
    Role.VIEWER: "this page is for viewers, operators and admins; ask an admin for a role",
    Role.OPERATOR: "only operators and admins may do this",
    Role.ADMIN: "only admins may do this",
}


def role(user: User) -> Role:
    """The user's highest role (one query per request; the answer is kept on the user object)."""
    if not user.is_authenticated:
        return Role.NONE
    if getattr(user, "is_superuser", False):
        return Role.SUPERUSER
    cached = getattr(user, _CACHE, None)
    if cached is None:
        names = user.groups.filter(name__in=ROLE_GROUPS).values_list("name", flat=True)  # type: ignore[union-attr]
        cached = max((ROLE_GROUPS[n] for n in names), default=Role.NONE)
        setattr(user, _CACHE, cached)
    return Role(cached)


def has_role(user: User, needed: Role) -> bool:
    return user.is_authenticated and role(user) >= needed


def is_viewer(user: User) -> bool:
    """Viewers and above see the fabric and the alerts."""
    return has_role(user, Role.VIEWER)


def is_operator(user: User) -> bool:
    """Operators and above see every run and silence and acknowledge alerts."""
    return has_role(user, Role.OPERATOR)


def is_admin(user: User) -> bool:
    """Admins and superusers change every run, the rules and the fabric-wide receivers."""
    return has_role(user, Role.ADMIN)


# -- runs --------------------------------------------------------------------------------------------


def _owns(user: User, obj: Any) -> bool:
    return bool(user.is_authenticated and obj.owner_id is not None and obj.owner_id == user.pk)


def can_see_run(user: User, run: Any) -> bool:
    """A run's owner and operators (admins, superusers) see it."""
    return _owns(user, run) or is_operator(user)


def can_change_run(user: User, run: Any) -> bool:
    """A run's owner and admins change it (tags, rank map, uploads, events, end)."""
    return _owns(user, run) or is_admin(user)


def runs_visible_to(user: User, runs: QuerySet[Any]) -> QuerySet[Any]:
    """``runs`` narrowed to those ``user`` may see."""
    if is_operator(user):
        return runs
    if not user.is_authenticated:
        return runs.none()
    return runs.filter(owner_id=user.pk)


def check_run(user: User, run: Any | None, *, change: bool = False) -> Any:
    """The run if ``user`` may see it (and change it, with ``change``); a run they may not see is
    a 404 like a missing one, a visible one they may not change a 403 saying who may."""
    if run is None or not can_see_run(user, run):
        raise Http404("no such run")
    if change and not can_change_run(user, run):
        raise PermissionDenied(f"run {run.pk} belongs to another user: only its owner or an admin changes it")
    return run


# -- alerts ------------------------------------------------------------------------------------------


def can_manage_receiver(user: User, receiver: Any) -> bool:
    """Fabric-wide receivers (no owner) are admins'; a job owner manages the receivers they made."""
    return _owns(user, receiver) or is_admin(user)


def receivers_visible_to(user: User, receivers: QuerySet[Any]) -> QuerySet[Any]:
    """Receiver URLs and secrets are credentials: admins see all, anyone else only their own."""
    if is_admin(user):
        return receivers
    if not user.is_authenticated:
        return receivers.none()
    return receivers.filter(owner_id=user.pk)


# -- decorators (pages and session JSON) --------------------------------------------------------------

# Any logged-in user (a job owner's own pages; the run rule is then asked with ``check_run``).
# Re-exported so every view's rule is spelled here: grep ``access.`` to see them all.
logged_in = login_required


def role_required(needed: Role) -> Callable[[View], View]:
    """Login (else the login redirect), then ``needed`` or above (else 403 with the reason)."""

    def decorate(view: View) -> View:
        @login_required
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not has_role(request.user, needed):
                raise PermissionDenied(REASONS[needed])
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


viewer_required = role_required(Role.VIEWER)
operator_required = role_required(Role.OPERATOR)
admin_required = role_required(Role.ADMIN)


def require_role(user: User, needed: Role) -> None:
    """Inside a view, for one method of it (a POST that needs more than the GET): 403 with the reason."""
    if not has_role(user, needed):
        raise PermissionDenied(REASONS[needed])


# -- sockets -------------------------------------------------------------------------------------------


def socket_refusal(user: User | None, needed: Role) -> int | None:
    """The close code refusing a socket (4401 log in, 4403 no role), or None to accept."""
    if user is None or not user.is_authenticated:
        return CLOSE_UNAUTHENTICATED
    return None if has_role(user, needed) else CLOSE_FORBIDDEN


def run_socket_refusal(user: User | None, run: Any | None) -> int | None:
    """A run's socket: 4401 log in, 4404 no such run (or not one this user may see), None to accept."""
    if user is None or not user.is_authenticated:
        return CLOSE_UNAUTHENTICATED
    return None if run is not None and can_see_run(user, run) else CLOSE_NO_SUCH_RUN
