"""Per-user ingest tokens: ``fmj_<prefix>_<secret>``. Stored as the prefix (lookup) plus an
HMAC-SHA256 of the whole token under SECRET_KEY (healthchecks' scheme, reliability.md §4);
compared in constant time; revocable."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from django.conf import settings
from django.utils import timezone

from fabricmon.jobs.models import ApiToken

TOKEN_PREFIX = "fmj_"


def _digest(token: str) -> str:
    return hmac.new(settings.SECRET_KEY.encode(), token.encode(), hashlib.sha256).hexdigest()


def issue_token(user, name: str = "") -> tuple[ApiToken, str]:  # type: ignore[no-untyped-def]
    """Create a token for ``user``; the clear text is returned once and never stored."""
    prefix = secrets.token_hex(4)
    token = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(24)}"
    row = ApiToken.objects.create(user=user, name=name, prefix=prefix, digest=_digest(token))
    return row, token


def authenticate_token(token: str, touch: bool = True) -> ApiToken | None:
    """The live token row for a presented token, or None (unknown, malformed or revoked);
    ``touch`` records its use (the body guard's early check only reads)."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    prefix = token[len(TOKEN_PREFIX) :].split("_", 1)[0]
    digest = _digest(token)
    for row in ApiToken.objects.filter(prefix=prefix, revoked_at__isnull=True).select_related("user"):
        if hmac.compare_digest(row.digest, digest):
            if not touch:
                return row
            ApiToken.objects.filter(pk=row.pk).update(last_used_at=timezone.now())
            return row
    return None


def revoke_token(row: ApiToken) -> None:
    ApiToken.objects.filter(pk=row.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
