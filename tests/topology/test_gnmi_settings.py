"""gNMI settings survive the database: import_fabric → fabric_spec round trip, absence kept."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fabricmon.core.topology.spec import GnmiSettings
from fabricmon.topology.models import Switch
from fabricmon.topology.services import fabric_spec, gnmi_settings, import_fabric
from tests.topologies import two_leaf_one_spine

pytestmark = pytest.mark.django_db


def test_gnmi_settings_round_trip_through_the_database() -> None:
    fab = two_leaf_one_spine("gdb", servers=2)
    sws = tuple(replace(sw, gnmi=GnmiSettings(50000 + k, 0.25)) if sw.role == "leaf" else sw
                for k, sw in enumerate(fab.switches))
    fab = replace(fab, switches=sws)
    import_fabric(fab)
    assert fabric_spec("gdb") == fab
    spine = Switch.objects.get(fabric__name="gdb", role="spine")
    assert spine.gnmi_port is None and gnmi_settings(spine) is None
    leaf = Switch.objects.get(fabric__name="gdb", name="leaf-r1")
    assert gnmi_settings(leaf) == GnmiSettings(50001, 0.25)
