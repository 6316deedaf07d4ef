"""Who may see what: the one place every view, API and socket asks.

Roles are auth groups (created by ``live/migrations/0001_roles.py``)::

    operators   watch the fabric: heatmap, ports, switches
    admins      operators who also administer (the Django admin)
    superuser   everything

A run's pages are seen by its owner and by staff; its phase views by any logged-in user. Views
use the decorators, consumers the predicates (run through ``database_sync_to_async``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

ROLE_GROUPS = ("operators", "admins")

User = AbstractBaseUser | AnonymousUser
View = Callable[..., HttpResponse]


def is_operator(user: User) -> bool:
    """Operators and admins (and superusers) watch the fabric; anyone else is refused."""
    if not user.is_authenticated:
        return False
    if getattr(user, "is_superuser", False):
        return True
    return bool(user.groups.filter(name__in=ROLE_GROUPS).exists())  # type: ignore[union-attr]


def is_staff(user: User) -> bool:
    return bool(getattr(user, "is_staff", False))


def can_see_run(user: User, run: Any) -> bool:
    """A run's owner and staff see it."""
    return user.is_authenticated and (run.owner_id == user.pk or is_staff(user))


def can_see_phase_views(user: User, run: Any) -> bool:
    """A run's phase views (page, JSON, socket): any logged-in user, today."""
    return bool(user.is_authenticated)


def operator_required(view: View) -> View:
    """Login, then the operator role (403 with the reason otherwise)."""

    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not is_operator(request.user):
            raise PermissionDenied("the dashboard is for operators and admins")
        return view(request, *args, **kwargs)

    return wrapped
