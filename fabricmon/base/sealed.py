"""Secrets at rest: SNMP communities and v3 keys, receiver URLs (a chat hook URL *is* the
credential) and webhook signing secrets, stored encrypted with Fernet (``cryptography``:
AES-128-CBC + HMAC-SHA256, authenticated; not hand-rolled).

A :class:`SealedField` column holds the Fernet token, never the plaintext. On the model the value
is a :class:`Sealed` (or ``""`` when no secret is set): assigning a string seals it at once, so a
model instance, its ``repr``, a traceback's locals or a pickled task never carry the plaintext.
Only the code that needs the secret calls :func:`reveal` — the collector's SNMP settings and the
delivery of a notification. Pages show :func:`shown` (``••••`` + the last 4, or "set"), exports
:func:`masked`.

Keys (``FABRICMON_SECRETS_KEY``, newest first) form a ``MultiFernet``: the first encrypts, every
one decrypts, and :func:`rotate_all` re-encrypts every row with the first. Behind them come keys
derived from ``SECRET_KEY`` and its fallbacks (HKDF-SHA256), the default when no key is set — as
django-fernet-fields does — so a deployment that adds a key later still reads its old rows.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Iterable
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.db import models, transaction
from django.db.models.query_utils import DeferredAttribute

from fabricmon.core.masking import mask_text, shown_text


class SecretUnreadableError(Exception):
    """A stored secret that none of the configured keys decrypts (a key was dropped too early)."""


UNREADABLE = (
    "a stored secret cannot be decrypted with any key of FABRICMON_SECRETS_KEY (or SECRET_KEY): was the "
    "key that sealed it removed? Put it back, run manage.py rotate_secrets, then drop it"
)


# --- keys -----------------------------------------------------------------------------------------


def _derived(secret_key: str) -> Fernet:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"fabricmon-sealed-secrets", info=b"fernet")
    return Fernet(base64.urlsafe_b64encode(hkdf.derive(secret_key.encode())))


@functools.cache
def _keyring(keys: tuple[str, ...], secret_keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([*(Fernet(k.encode()) for k in keys), *(_derived(s) for s in secret_keys if s)])


def keyring() -> MultiFernet:
    """The configured keys, newest first (built once per distinct setting)."""
    return _keyring(
        tuple(settings.FABRICMON_SECRETS_KEYS),
        (settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())),
    )


# --- values ---------------------------------------------------------------------------------------


class Sealed:
    """A stored secret: its Fernet token. Prints as ``Sealed(set)``, never as the secret."""

    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token

    @classmethod
    def seal(cls, plaintext: str) -> Sealed:
        return cls(keyring().encrypt(plaintext.encode()).decode())

    def reveal(self) -> str:
        try:
            return keyring().decrypt(self.token.encode()).decode()
        except InvalidToken:
            raise SecretUnreadableError(UNREADABLE) from None

    def rotated(self) -> Sealed:
        """The same secret sealed with the first key (its timestamp kept)."""
        try:
            return Sealed(keyring().rotate(self.token.encode()).decode())
        except InvalidToken:
            raise SecretUnreadableError(UNREADABLE) from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sealed) and other.token == self.token

    def __hash__(self) -> int:
        return hash(self.token)

    def __repr__(self) -> str:
        return "Sealed(set)"

    __str__ = __repr__

    def __reduce__(self) -> tuple[Any, ...]:
        return (Sealed, (self.token,))


SecretValue = Sealed | str  # "" when no secret is set


def reveal(value: SecretValue | None) -> str:
    """The plaintext, for the one place that uses it (collector settings, a delivery)."""
    if isinstance(value, Sealed):
        return value.reveal()
    return value or ""  # "" (not set), or a plain string that was never stored


def masked(value: SecretValue | None) -> str:
    """For exports: ``""`` when not set, else ``••••`` + the last 4 (``core.masking.mask_text``)."""
    return mask_text(reveal(value))


def shown(value: SecretValue | None) -> str:
    """For pages: "not set", "set", or ``••••`` + the last 4."""
    return shown_text(reveal(value))


# --- the model field ------------------------------------------------------------------------------


class _SealingAttribute(DeferredAttribute):
    """Seal plain strings the moment they are assigned to the model attribute."""

    def __set__(self, instance: models.Model, value: Any) -> None:
        instance.__dict__[self.field.attname] = _as_sealed(value)


def _as_sealed(value: Any) -> SecretValue:
    if isinstance(value, Sealed) or value is None or value == "":
        return value if value is not None else ""
    return Sealed.seal(str(value))


class SealedField(models.TextField):
    """A secret column: Fernet tokens in the database, :class:`Sealed` on the model.

    ``max_length`` bounds the plaintext a form accepts (tokens are ~1.4x longer, so the column is
    a text column). Lookups by value cannot work (every token is different) and are not used.
    """

    descriptor_class = _SealingAttribute

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> SecretValue:
        return Sealed(value) if value else ""

    def to_python(self, value: Any) -> Any:
        # loaddata hands back what dumpdata wrote (a token): keep it sealed, never seal it twice.
        # Anything else (a Sealed, "", a plain string) the attribute takes as it is.
        if isinstance(value, str) and value and _readable(value) is not None:
            return Sealed(value)
        return value

    def get_prep_value(self, value: Any) -> str:
        sealed = _as_sealed(value)
        return sealed.token if isinstance(sealed, Sealed) else ""

    def formfield(self, **kwargs: Any) -> Any:
        # a one-line input bounded by max_length, like the CharField these columns were (not a Textarea)
        return models.Field.formfield(self, **{"max_length": self.max_length, **kwargs})

    def value_to_string(self, obj: models.Model) -> str:
        return self.get_prep_value(self.value_from_object(obj))  # dumpdata: the token, never plaintext


def sealed_fields(model: type[models.Model]) -> list[str]:
    return [f.name for f in model._meta.get_fields() if isinstance(f, SealedField)]


def rotate_all(models_: Iterable[type[models.Model]]) -> int:
    """Re-encrypt every stored secret of ``models_`` with the first key; returns the rows rewritten.

    ``MultiFernet.rotate`` keeps each token's timestamp and raises on a token no key reads, so a
    bad key list changes nothing (one transaction per model).
    """
    rewritten = 0
    for model in models_:
        names = sealed_fields(model)
        if not names:
            continue
        with transaction.atomic():
            for pk, *values in model._default_manager.values_list("pk", *names).iterator():
                fresh = {n: v.rotated() for n, v in zip(names, values, strict=True) if isinstance(v, Sealed)}
                if fresh:
                    model._default_manager.filter(pk=pk).update(**fresh)
                    rewritten += 1
    return rewritten


# --- data migrations ------------------------------------------------------------------------------


def seal_columns(schema_editor: Any, table: str, columns: Iterable[str]) -> int:
    """Encrypt the plaintext left in ``table.columns`` by a version before sealing (raw SQL: the
    ORM would take the plaintext for a token). Values that already decrypt are left alone, so a
    re-run changes nothing. Returns the rows rewritten."""
    return _rewrite(schema_editor, table, list(columns), _seal_plain)


def unseal_columns(schema_editor: Any, table: str, columns: Iterable[str]) -> int:
    """The reverse migration: tokens back to plaintext."""
    return _rewrite(schema_editor, table, list(columns), lambda v: _readable(v) or v)


def _readable(value: str) -> str | None:
    try:
        return keyring().decrypt(value.encode()).decode()
    except InvalidToken:
        return None


def _seal_plain(value: str) -> str:
    return value if _readable(value) is not None else Sealed.seal(value).token


def _rewrite(schema_editor: Any, table: str, columns: list[str], change: Any) -> int:
    q = schema_editor.connection.ops.quote_name
    cols = ", ".join(q(c) for c in columns)
    sets = ", ".join(f"{q(c)} = %s" for c in columns)
    rewritten = 0
    with schema_editor.connection.cursor() as cur:
        cur.execute(f"SELECT {q('id')}, {cols} FROM {q(table)}")
        rows = cur.fetchall()
        for pk, *values in rows:
            fresh = [change(v) if v else (v or "") for v in values]
            if fresh != list(values):
                cur.execute(f"UPDATE {q(table)} SET {sets} WHERE {q('id')} = %s", [*fresh, pk])
                rewritten += 1
    return rewritten
