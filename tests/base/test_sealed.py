"""Secrets at rest (fabricmon/base/sealed.py): the columns hold Fernet tokens, never plaintext (read
back with raw SQL and checked with ``cryptography`` directly); the model carries a ``Sealed`` that
never prints its secret; only ``reveal`` decrypts; key rotation with a key list and
``rotate_secrets``; a secret no key reads fails a delivery for good instead of leaving it stuck."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import pytest
from cryptography.fernet import Fernet, InvalidToken
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from fabricmon.alerts import delivery
from fabricmon.alerts.models import Outbox, Receiver
from fabricmon.base.sealed import Sealed, SecretUnreadableError, reveal
from fabricmon.core.topology.spec import SnmpSettings
from fabricmon.topology.models import Switch
from fabricmon.topology.services import fabric_spec, import_fabric
from tests.secret_env import TEST_SECRETS_KEY
from tests.topologies import two_leaf_one_spine

pytestmark = pytest.mark.django_db
COMMUNITY, AUTH, PRIV = "community-secret-1", "auth-secret-222", "priv-secret-333"
HOOK = "https://hooks.slack.com/services/T0001/B0002/hooktoken9999"
WHSEC = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
KEY_A, KEY_B = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def raw(table: str, *columns: str) -> list[tuple[str, ...]]:
    with connection.cursor() as cur:
        cur.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY id")
        return cur.fetchall()


@pytest.fixture
def v3_fabric() -> None:
    snmp = SnmpSettings(version="3", community=COMMUNITY, v3_user="mon", v3_auth_key=AUTH, v3_priv_key=PRIV)
    import_fabric(two_leaf_one_spine("tiny", servers=2, uplinks_per_leaf=1, snmp=snmp))


def test_columns_hold_tokens_and_the_collector_spec_reveals_them(v3_fabric: None) -> None:
    Receiver.objects.create(name="chat", kind="slack", url=HOOK, secret=WHSEC)
    rows = raw("topology_switch", "snmp_community", "v3_auth_key", "v3_priv_key")
    rows += raw("alerts_receiver", "url", "secret")
    fernet = Fernet(TEST_SECRETS_KEY.encode())  # the configured key, used independently of our code
    plain = {COMMUNITY, AUTH, PRIV, HOOK, WHSEC}
    assert len(rows) == 4
    for row in rows:
        for token in row:
            assert not any(p in token or p[-8:] in token for p in plain)
            assert fernet.decrypt(token.encode()).decode() in plain
    sw = Switch.objects.get(name="leaf-r0")
    assert isinstance(sw.v3_auth_key, Sealed) and reveal(sw.v3_auth_key) == AUTH
    snmp = fabric_spec("tiny").switch("leaf-r0").snmp  # what the collectors get
    assert (snmp.community, snmp.v3_auth_key, snmp.v3_priv_key) == (COMMUNITY, AUTH, PRIV)
    omitted = fabric_spec("tiny", secrets="omit").switch("leaf-r0").snmp  # the views' spec
    assert (omitted.community, omitted.v3_auth_key, omitted.v3_priv_key) == ("", "", "")


def test_a_sealed_value_never_prints_its_secret(v3_fabric: None) -> None:
    sw = Switch.objects.get(name="leaf-r0")
    sw.snmp_community = "assigned-in-code-77"  # sealed the moment it is assigned
    text = f"{sw.snmp_community} {sw.snmp_community!r} {sw.__dict__} {pickle.dumps(sw)!r}"
    assert "assigned-in-code-77" not in text and AUTH not in text
    assert reveal(pickle.loads(pickle.dumps(sw)).snmp_community) == "assigned-in-code-77"
    sw.save()
    assert reveal(Switch.objects.get(pk=sw.pk).snmp_community) == "assigned-in-code-77"
    # an empty secret stays "" (nothing to seal), so "is it set?" needs no decryption
    Switch.objects.filter(pk=sw.pk).update(v3_priv_key="")
    assert Switch.objects.get(pk=sw.pk).v3_priv_key == ""
    assert raw("topology_switch", "v3_priv_key").count(("",)) == 1


def test_rotation_with_a_key_list_and_rotate_secrets() -> None:
    with override_settings(FABRICMON_SECRETS_KEYS=[KEY_A]):
        rcv = Receiver.objects.create(name="hook", kind="webhook", url=HOOK, secret=WHSEC)
    [(old_url, old_secret)] = raw("alerts_receiver", "url", "secret")
    with override_settings(FABRICMON_SECRETS_KEYS=[KEY_B, KEY_A]):  # new key in front: old rows still read
        assert reveal(Receiver.objects.get(pk=rcv.pk).url) == HOOK
        out = io.StringIO()
        call_command("rotate_secrets", stdout=out)
        assert "re-encrypted the secrets of 1 rows" in out.getvalue()
    [(new_url, new_secret)] = raw("alerts_receiver", "url", "secret")
    assert new_url != old_url and new_secret != old_secret
    assert Fernet(KEY_B.encode()).decrypt(new_url.encode()).decode() == HOOK
    with pytest.raises(InvalidToken):
        Fernet(KEY_A.encode()).decrypt(new_url.encode())
    with override_settings(FABRICMON_SECRETS_KEYS=[KEY_B]):  # the old key dropped: still readable
        got = Receiver.objects.get(pk=rcv.pk)
        assert (reveal(got.url), reveal(got.secret)) == (HOOK, WHSEC)
    with override_settings(FABRICMON_SECRETS_KEYS=[KEY_A]):  # the new key dropped too early
        with pytest.raises(SecretUnreadableError, match="FABRICMON_SECRETS_KEY"):
            reveal(Receiver.objects.get(pk=rcv.pk).url)
        with pytest.raises(CommandError, match="cannot be decrypted"):
            call_command("rotate_secrets", stdout=io.StringIO())
    assert raw("alerts_receiver", "url") == [(new_url,)]  # a failed rotation changed nothing


def test_without_a_secrets_key_secret_key_derives_one_and_its_fallback_still_reads() -> None:
    with override_settings(FABRICMON_SECRETS_KEYS=[], SECRET_KEY="first-secret-key-" * 3):
        rcv = Receiver.objects.create(name="hook", kind="webhook", url=HOOK)
    [(token,)] = raw("alerts_receiver", "url")
    with pytest.raises(InvalidToken):
        Fernet(TEST_SECRETS_KEY.encode()).decrypt(token.encode())
    with override_settings(FABRICMON_SECRETS_KEYS=[KEY_A], SECRET_KEY="second-secret-key-" * 3,
                           SECRET_KEY_FALLBACKS=["first-secret-key-" * 3]):
        assert reveal(Receiver.objects.get(pk=rcv.pk).url) == HOOK
        call_command("rotate_secrets", stdout=io.StringIO())  # now under the explicit key
    assert Fernet(KEY_A.encode()).decrypt(raw("alerts_receiver", "url")[0][0].encode()).decode() == HOOK


def test_a_secret_no_key_reads_fails_the_delivery_for_good() -> None:
    with override_settings(FABRICMON_SECRETS_KEYS=[KEY_A]):
        rcv = Receiver.objects.create(name="hook", kind="webhook", url=HOOK)
    now = timezone.now()
    row = Outbox.objects.create(receiver=rcv, payload={
        "id": "m1", "fingerprint": "f", "fabric": "tiny", "kind": "incast", "key": "leaf-r0:Ethernet1",
        "status": "firing", "summary": "s", "starts_at": now.isoformat()}, created_at=now, next_attempt_at=now)
    with override_settings(FABRICMON_SECRETS_KEYS=[KEY_B]):
        assert delivery.deliver(row.id, now) == Outbox.Status.FAILED
    row.refresh_from_db()
    assert row.status == Outbox.Status.FAILED and "cannot be decrypted" in row.last_error
    assert HOOK not in row.last_error


def test_dumpdata_writes_tokens_and_loaddata_keeps_them(tmp_path: Path) -> None:
    Receiver.objects.create(name="hook", kind="webhook", url=HOOK, secret=WHSEC)
    dump = tmp_path / "receivers.json"
    call_command("dumpdata", "alerts.receiver", output=str(dump))
    assert HOOK not in dump.read_text() and WHSEC not in dump.read_text()
    Receiver.objects.all().delete()
    call_command("loaddata", str(dump), stdout=io.StringIO())
    got = Receiver.objects.get()
    assert (reveal(got.url), reveal(got.secret)) == (HOOK, WHSEC)  # not sealed twice
