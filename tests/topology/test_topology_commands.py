"""The management commands: generate → load → export round trip, all-or-nothing loads with errors
naming file, entry and field, and the rail-plan check's exit status.

Fixture topology ``two_leaf_one_spine`` (generated: 2 servers x 2 GPUs, 1 spine)::

                 [spine0]
           Eth1 /        \\ Eth2
      Eth3 [leaf-r0]    [leaf-r1] Eth3
       Eth1 |   | Eth2   Eth1 |   | Eth2
       node001  node002   node001  node002          (gpu r / mlx5_r → leaf-r{r})
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from fabricmon.core.topology.yaml_dump import dump_fabric
from fabricmon.core.topology.yaml_load import load_fabric
from fabricmon.topology.models import Fabric, Gpu, Host, Link, Nic, Port, Switch, TopologyVersion
from fabricmon.topology.services import fabric_spec
from tests.secret_env import TEST_SECRET_KEY, TEST_SECRETS_KEY
from tests.topologies import one_su_256_gpus, two_leaf_one_spine

pytestmark = pytest.mark.django_db
MODELS = (Fabric, Switch, Port, Link, Host, Gpu, Nic, TopologyVersion)
ROOT = Path(__file__).resolve().parents[2]
GENERATE_TINY = ["--name", "tiny", "--servers", "2", "--gpus-per-server", "2", "--spines", "1"]


def row_counts() -> dict[str, int]:
    return {m.__name__: m.objects.count() for m in MODELS}


def run(*args: str, stdin: str | None = None) -> str:
    out = io.StringIO()
    if stdin is None:
        call_command(*args, stdout=out)
    else:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("sys.stdin", io.StringIO(stdin))
            call_command(*args, stdout=out)
    return out.getvalue()


def test_generate_load_export_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "su1.yaml"
    run("generate_topology", "--servers", "32", "--gpus-per-server", "8", "--spines", "4",
        "--speed-gbps", "400", "--name", "su1", "-o", str(path))
    assert load_fabric(path.read_text()) == one_su_256_gpus()
    msg = run("load_topology", str(path))
    assert "loaded fabric 'su1': 12 switches, 768 ports, 32 hosts, 256 GPUs, 256 links" in msg
    assert fabric_spec("su1") == one_su_256_gpus()
    assert run("export_topology", "su1", "--with-secrets") == path.read_text()
    out = tmp_path / "back.yaml"
    run("export_topology", "su1", "--with-secrets", "-o", str(out))
    assert out.read_text() == path.read_text()
    assert oct(out.stat().st_mode & 0o777) == "0o600"  # a file with secrets in clear: owner-only
    # without --with-secrets the community ("public") is masked, and the file still loads back
    masked = run("export_topology", "su1")
    assert masked == path.read_text().replace("port: 16100}", "port: 16100, community: ••••}", 1)
    run("load_topology", "-", stdin=masked)
    assert fabric_spec("su1") == one_su_256_gpus()


def test_bad_file_names_file_entry_and_field_and_stores_nothing(tmp_path: Path) -> None:
    good = tmp_path / "tiny.yaml"
    run("generate_topology", *GENERATE_TINY, "-o", str(good))
    run("load_topology", str(good))
    before = row_counts()
    doc = yaml.safe_load(good.read_text())
    doc["switches"][1]["ports"][2]["speed_gbps"] = "fast"
    doc["hosts"].append({"name": "node003", "gpus": [
        {"index": 0, "nic": "mlx5_0", "rail": 0, "switch": "leaf-r0", "port": "Ethernet1"}]})
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(CommandError) as info:
        run("load_topology", str(bad))
    text = str(info.value)
    assert f"{bad}: switches[1] (leaf-r1).ports[2]: field 'speed_gbps': expected a positive number, got 'fast'" in text
    assert f"{bad}: hosts[2] (node003).gpus[0]: field 'port': port leaf-r0:Ethernet1 is cabled twice" in text
    assert row_counts() == before
    assert fabric_spec("tiny") == load_fabric(good.read_text())


def test_no_replace_and_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    run("generate_topology", *GENERATE_TINY, "-o", str(path))
    run("load_topology", str(path))
    with pytest.raises(CommandError, match="'tiny' exists"):
        run("load_topology", "--no-replace", str(path))
    with pytest.raises(CommandError, match=r"nope\.yaml: cannot read"):
        run("load_topology", str(tmp_path / "nope.yaml"))
    with pytest.raises(CommandError, match=r"no fabric 'other' \(known: tiny\)"):
        run("export_topology", "other")


def test_check_rail_plan_exit_status(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    run("generate_topology", *GENERATE_TINY, "-o", str(path))
    run("load_topology", str(path))
    assert run("check_rail_plan", "tiny") == "tiny: rail plan OK\n"
    # Re-cable node002's NICs onto each other's leaf and re-import.
    doc = yaml.safe_load(path.read_text())
    g0, g1 = doc["hosts"][1]["gpus"]
    g0["switch"], g1["switch"] = g1["switch"], g0["switch"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    run("load_topology", str(path))
    out = io.StringIO()
    with pytest.raises(CommandError, match="tiny: 2 NICs off the rail plan") as info:
        call_command("check_rail_plan", "tiny", stdout=out)
    assert info.value.returncode == 1
    assert out.getvalue().splitlines()[0] == (
        "node002 gpu0 mlx5_0: rail 0, cabled to leaf-r1:Ethernet2 which serves rail 1; expected a leaf of rail 0")


def test_generate_rejects_impossible_shape() -> None:
    with pytest.raises(CommandError, match="does not divide evenly over 3 spines"):
        run("generate_topology", "--servers", "32", "--spines", "3")


def test_load_topology_exits_non_zero_from_the_shell(tmp_path: Path) -> None:
    """The real entry point: a broken file gives exit status 1 and the problem on stderr."""
    bad = tmp_path / "broken.yaml"
    bad.write_text(dump_fabric(two_leaf_one_spine("tiny", servers=2))
                   .replace("role: spine", "role: core"))
    proc = subprocess.run(
        [sys.executable, "manage.py", "load_topology", str(bad)],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
             "SECRET_KEY": TEST_SECRET_KEY, "FABRICMON_SECRETS_KEY": TEST_SECRETS_KEY,
             "FABRICMON_VAR_DIR": str(tmp_path)},
    )
    assert proc.returncode == 1, proc.stderr
    assert f"{bad}: switches[2] (spine0): field 'role': expected one of 'leaf', 'spine', got 'core'" in proc.stderr
