"""The topology admin: every model's list and detail page renders with bounded queries, and SNMP
secrets are write-only (never rendered, kept when the field is left empty).

Fixture ``two_leaf_one_spine`` with SNMP v3 on every switch::

                 [spine0]
           Eth1 /        \\ Eth2
      Eth3 [leaf-r0]    [leaf-r1] Eth3          v3 user "mon", auth/priv keys set
       Eth1 |   | Eth2   Eth1 |   | Eth2
       node001  node002   node001  node002
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from fabricmon.base.sealed import reveal
from fabricmon.core.topology.spec import SnmpSettings
from fabricmon.topology.models import Fabric, Gpu, Host, Link, Nic, Port, Switch, TopologyVersion
from fabricmon.topology.services import import_fabric
from tests.topologies import two_leaf_one_spine

pytestmark = pytest.mark.django_db
AUTH_KEY, PRIV_KEY, COMMUNITY = "auth-secret-123", "priv-secret-456", "comm-secret-789"


@pytest.fixture
def tiny() -> Fabric:
    snmp = SnmpSettings(version="3", community=COMMUNITY, v3_user="mon", v3_auth_key=AUTH_KEY,
                        v3_priv_key=PRIV_KEY)
    return import_fabric(two_leaf_one_spine("tiny", servers=2, uplinks_per_leaf=1, snmp=snmp))


@pytest.mark.parametrize("model", [Fabric, Switch, Port, Link, Host, Gpu, Nic, TopologyVersion],
                         ids=lambda m: m.__name__)
def test_every_model_has_list_and_detail_pages(admin_client: Client, tiny: Fabric, model: type,
                                               django_assert_max_num_queries) -> None:  # type: ignore[no-untyped-def]
    meta = model._meta  # type: ignore[attr-defined]
    with django_assert_max_num_queries(12):  # independent of the number of rows shown
        page = admin_client.get(reverse(f"admin:topology_{meta.model_name}_changelist"))
    assert page.status_code == 200
    obj = model.objects.first()  # type: ignore[attr-defined]
    detail = admin_client.get(reverse(f"admin:topology_{meta.model_name}_change", args=[obj.pk]))
    assert detail.status_code == 200
    for secret in (AUTH_KEY, PRIV_KEY, COMMUNITY):
        assert secret not in page.content.decode() and secret not in detail.content.decode()


def test_filters_and_search(admin_client: Client, tiny: Fabric) -> None:
    url = reverse("admin:topology_switch_changelist")
    page = admin_client.get(url, {"role": "leaf", "rail": "1", "fabric__id__exact": tiny.pk})
    assert page.status_code == 200 and page.context["cl"].result_count == 1
    page = admin_client.get(reverse("admin:topology_port_changelist"), {"q": "spine0"})
    assert page.context["cl"].result_count == 4  # spine0's 2 ports + the 2 leaf uplinks facing it
    page = admin_client.get(reverse("admin:topology_nic_changelist"), {"q": "node002", "rail": "0"})
    assert page.context["cl"].result_count == 1


def _switch_post(sw: Switch, **changes: str) -> dict[str, str]:
    data = {
        "fabric": str(sw.fabric_id), "name": sw.name, "role": sw.role, "rail": "" if sw.rail is None else str(sw.rail),
        "mgmt_address": sw.mgmt_address, "collector": sw.collector, "snmp_version": sw.snmp_version,
        "snmp_port": str(sw.snmp_port), "snmp_community": "", "interval_s": str(sw.interval_s),
        "timeout_s": str(sw.timeout_s), "retries": str(sw.retries), "v3_user": sw.v3_user,
        "v3_auth_protocol": sw.v3_auth_protocol, "v3_auth_key": "", "v3_priv_protocol": sw.v3_priv_protocol,
        "v3_priv_key": "", "v3_context": sw.v3_context,
        "gnmi_port": "" if sw.gnmi_port is None else str(sw.gnmi_port),
        "gnmi_sample_interval_s": str(sw.gnmi_sample_interval_s),
        "ports-TOTAL_FORMS": "0", "ports-INITIAL_FORMS": "0", "ports-MIN_NUM_FORMS": "0",
        "ports-MAX_NUM_FORMS": "1000",
    }
    data.update(changes)
    return data


def test_secrets_are_write_only(admin_client: Client, tiny: Fabric) -> None:
    sw = Switch.objects.get(name="leaf-r0")
    url = reverse("admin:topology_switch_change", args=[sw.pk])
    # Empty fields keep the stored secrets.
    resp = admin_client.post(url, _switch_post(sw, mgmt_address="10.0.0.1"))
    assert resp.status_code == 302, resp.content.decode()[:2000]
    sw.refresh_from_db()
    assert (sw.mgmt_address, *map(reveal, (sw.v3_auth_key, sw.v3_priv_key, sw.snmp_community))) == (
        "10.0.0.1", AUTH_KEY, PRIV_KEY, COMMUNITY)
    # A typed value replaces; "clear" empties.
    resp = admin_client.post(url, _switch_post(sw, v3_auth_key="new-auth-key", clear_v3_priv_key="on"))
    assert resp.status_code == 302
    sw.refresh_from_db()
    assert tuple(map(reveal, (sw.v3_auth_key, sw.v3_priv_key, sw.snmp_community))) == (
        "new-auth-key", "", COMMUNITY)
    page = admin_client.get(url).content.decode()
    assert "new-auth-key" not in page
    # shown masked (the last 4 of a secret of 12 characters or more), "not set" for an empty one
    assert "stored: ••••-key; leave empty" in page and "stored: ••••-789; leave empty" in page
    assert "not set" in page
