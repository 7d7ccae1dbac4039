"""The package-scale rules of issue 13 hold in the tree: modules of one job (at most ~500 lines) that import
no other module's private names."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("schemas", "bus", "workers", "streams", "infra", "rewardstream")
MAX_LINES = 500


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_no_module_is_over_the_size_of_one_job() -> None:
    over = {
        str(p.relative_to(ROOT)): n
        for p in modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not over, over


def test_no_module_imports_another_modules_private_names() -> None:
    found = set()
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in PACKAGES):
                found |= {
                    (str(path.relative_to(ROOT)), alias.name)
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                }
    assert not found, sorted(found)
