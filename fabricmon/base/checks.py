"""fabricmon's own deployment checks, beside Django's (``manage.py check --deploy``).

Registered by ``topology.apps`` (the lowest app, loaded by every process).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Tags, Warning, register

W001 = Warning(
    "FABRICMON_SECRETS_KEY is not set: SNMP secrets and receiver URLs are encrypted with a key derived "
    "from SECRET_KEY, so rotating SECRET_KEY without keeping it in SECRET_KEY_FALLBACKS makes them "
    "unreadable.",
    hint="Set FABRICMON_SECRETS_KEY to a Fernet key (python -c 'from cryptography.fernet import Fernet; "
         "print(Fernet.generate_key().decode())') and run manage.py rotate_secrets.",
    id="fabricmon.W001",
)


@register(Tags.security, deploy=True)
def secrets_key_check(app_configs: Any, **kwargs: Any) -> list[Warning]:
    return [] if settings.FABRICMON_SECRETS_KEYS else [W001]
