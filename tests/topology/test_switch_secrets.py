"""SNMP secrets in the topology export: masked (``••••`` + the last 4), never in clear unless asked;
an exported file loads back keeping the stored secrets; a masked value that does not match the
stored secret (or a switch with none) is refused, naming switch and field, and nothing changes.

Fixture ``two_leaf_one_spine`` with SNMP v3 on every switch::

                 [spine0]
                /        \\
          [leaf-r0]    [leaf-r1]          community, v3 auth and priv keys set
           |    |        |    |
       node001 node002 node001 node002
"""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from fabricmon.base.sealed import reveal
from fabricmon.core.topology.spec import SnmpSettings
from fabricmon.topology.fabric_view import fabric_view
from fabricmon.topology.models import Switch
from fabricmon.topology.services import fabric_spec, import_fabric
from tests.topologies import two_leaf_one_spine

pytestmark = pytest.mark.django_db
COMMUNITY, AUTH, PRIV = "community-secret-1", "auth-secret-222", "priv-8ch"  # priv: short, shown as ••••


def export(*args: str) -> str:
    out = io.StringIO()
    call_command("export_topology", "tiny", *args, stdout=out)
    return out.getvalue()


def load(text: str) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stdin", io.StringIO(text))
        call_command("load_topology", "-", stdout=io.StringIO())


def secrets_of(name: str) -> tuple[str, str, str]:
    sw = Switch.objects.get(name=name)
    return reveal(sw.snmp_community), reveal(sw.v3_auth_key), reveal(sw.v3_priv_key)


@pytest.fixture
def tiny() -> None:
    snmp = SnmpSettings(version="3", community=COMMUNITY, v3_user="mon", v3_auth_key=AUTH, v3_priv_key=PRIV)
    import_fabric(two_leaf_one_spine("tiny", servers=2, uplinks_per_leaf=1, snmp=snmp))


def test_export_masks_and_loads_back_keeping_the_stored_secrets(tiny: None) -> None:
    text = export()
    assert COMMUNITY not in text and AUTH not in text and PRIV not in text
    assert "community: ••••et-1" in text and "v3_auth_key: ••••-222" in text and "v3_priv_key: ••••" in text
    before = Switch.objects.filter(fabric__name="tiny").values_list("v3_auth_key", flat=True).first()
    load(text.replace("mgmt_address: 127.0.0.1", "mgmt_address: 10.9.9.9", 1))  # an operator's edit
    assert Switch.objects.filter(mgmt_address="10.9.9.9").count() == 1
    assert all(secrets_of(n) == (COMMUNITY, AUTH, PRIV) for n in ("leaf-r0", "leaf-r1", "spine0"))
    assert Switch.objects.filter(fabric__name="tiny").values_list("v3_auth_key", flat=True).first() == before
    clear = export("--with-secrets")
    assert f"v3_auth_key: {AUTH}" in clear and f"community: {COMMUNITY}" in clear


def test_a_mask_that_does_not_match_is_refused_and_nothing_changes(tiny: None) -> None:
    text = export()
    with pytest.raises(CommandError) as info:
        load(text.replace("••••-222", "••••-999"))
    assert "field 'v3_auth_key' is a masked value from an export (••••-999)" in str(info.value)
    assert "give the secret itself or v3_auth_key_env" in str(info.value)
    assert secrets_of("leaf-r0") == (COMMUNITY, AUTH, PRIV)
    # a masked file for a fabric that is not stored: no secret to stand for
    with pytest.raises(CommandError, match=r"switch 'leaf-r0': field 'community' is a masked value"):
        load(text.replace("fabric: tiny", "fabric: other", 1))
    assert not Switch.objects.filter(fabric__name="other").exists()


def test_the_cached_view_of_a_fabric_holds_no_secrets(tiny: None) -> None:
    snmp = fabric_view("tiny").spec.switch("leaf-r0").snmp
    assert (snmp.community, snmp.v3_auth_key, snmp.v3_priv_key) == ("", "", "")
    assert fabric_spec("tiny").switch("leaf-r0").snmp.v3_auth_key == AUTH
