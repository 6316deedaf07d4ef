"""``manage.py rotate_secrets``: re-encrypt every stored secret with the first FABRICMON_SECRETS_KEY.

Key rotation, as with any MultiFernet: put the new key in front of FABRICMON_SECRETS_KEY (all
processes), run this, then drop the old key. Covers every model with a sealed column (switch SNMP
secrets, receiver URLs and secrets); here because topology is the lowest app every install has.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError

from fabricmon.base.sealed import SecretUnreadableError, rotate_all


class Command(BaseCommand):
    help = "Re-encrypt every stored secret with the first key of FABRICMON_SECRETS_KEY."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            n = rotate_all(apps.get_models())
        except SecretUnreadableError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"re-encrypted the secrets of {n} rows with the first key")
