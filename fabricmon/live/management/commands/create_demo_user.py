"""``manage.py create_demo_user [--username U --password P --role viewers|operators|admins]``.

Idempotent: creates or updates the user and puts it in the role's group (admins also get the
Django admin site). Used by ``make demo`` and the browser tests.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandParser

from fabricmon.base.access import ROLE_GROUPS


class Command(BaseCommand):
    help = "Create (or reset) a dashboard user in the viewers, operators or admins group."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="operator")
        parser.add_argument("--password", default="operator")
        parser.add_argument("--role", choices=list(ROLE_GROUPS), default="operators")

    def handle(self, *args: Any, **opts: Any) -> None:
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(username=opts["username"])
        user.set_password(opts["password"])
        user.is_staff = opts["role"] == "admins"
        user.is_superuser = opts["role"] == "admins"
        user.save()
        group, _ = Group.objects.get_or_create(name=opts["role"])
        user.groups.add(group)
        verb = "created" if created else "updated"
        self.stdout.write(f"{verb} user {user.username!r} in group {opts['role']!r}")
