"""fabricmon/core and collectors stay free of Django, Celery and Channels (DESIGN.md)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("django", "celery", "channels", "channels_redis", "daphne")
PURE = sorted([*(ROOT / "fabricmon" / "core").rglob("*.py"), *(ROOT / "collectors").rglob("*.py")])


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
