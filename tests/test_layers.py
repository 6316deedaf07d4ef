"""The house's layer order (pyproject.toml ``[tool.importlinter]``) and its framework-free floors.

``lint-imports`` checks the contracts: apps depend downward only
(``core < collectors < base < topology < telemetry | jobs < phases | alerts < live | reports <
composition``),
``fabricmon/core`` and ``collectors`` import no web framework, and the product and the twin never
import each other's apps. A second run against a contract the tree is known to break shows the
checker really sees the imports (a checker that reads nothing would pass everything).
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
FORBIDDEN = ("django", "celery", "channels", "channels_redis", "daphne")
PURE = sorted([*(ROOT / "fabricmon" / "core").rglob("*.py"), *(ROOT / "collectors").rglob("*.py")])


def _lint(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)


def test_the_layer_contracts_are_kept() -> None:
    done = _lint()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 kept, 0 broken" in done.stdout


def test_an_upward_import_is_reported(tmp_path: Path) -> None:
    # live imports phases (allowed: downward); declared the other way round it must be caught
    config = tmp_path / "upside_down.toml"
    config.write_text(
        '[tool.importlinter]\nroot_packages = ["fabricmon"]\n\n'
        '[[tool.importlinter.contracts]]\nname = "upside down"\ntype = "layers"\n'
        'layers = ["fabricmon.phases", "fabricmon.live"]\n'
    )
    done = _lint("--config", str(config))
    assert done.returncode != 0
    assert "fabricmon.live" in done.stdout and "BROKEN" in done.stdout


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_layers_do_not_import_web_frameworks(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"


def test_layering_check_sees_the_tree() -> None:
    assert any(p.name == "frames.py" for p in PURE)
