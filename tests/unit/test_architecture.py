"""The package-scale rules of issue 13 hold in the tree: modules of one job (at most ~500 lines, tests and
benchmarks too since issue 25) that import no other module's private names."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from infra.lint.slice_caps import findings, literal_caps

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("guest", "schemas", "bus", "workers", "streams", "infra", "rewardstream")
MAX_LINES = 500


#: Held to the size rule like the packages, but free to import private names (a test reaches into its module).
SIZED_ONLY = ("tests", "benchmarks")


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def lines_of(paths: list[Path]) -> dict[str, int]:
    return {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines()) for p in paths}


def test_no_module_is_over_the_size_of_one_job() -> None:
    sized = lines_of(modules() + sorted(p for top in SIZED_ONLY for p in (ROOT / top).rglob("*.py")))
    over = {path: n for path, n in sized.items() if n > MAX_LINES}
    assert over == {}


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


def test_no_text_is_cut_to_a_cap_written_as_a_number() -> None:
    assert findings(ROOT) == []
    assert "python -m infra.lint.slice_caps" in (ROOT / "Makefile").read_text(encoding="utf-8")  # make lint


def test_a_new_literal_slice_cap_fails_the_check_and_a_named_one_does_not() -> None:
    sample = """
a = text[:300]
b = text[-400:]
c = data[: 64 * 1024]
d = items[16:]
e = text[2:-2], text[:8], text[:CAP], text[: len(text) - 20], fit(Model, "field", text)
"""
    assert [line for line, _ in literal_caps(sample)] == [2, 3, 4, 5]


def test_the_check_reads_every_first_party_package_but_the_guest(tmp_path: Path) -> None:
    for name in ("workers/roles/new.py", "guest/new.py", "tests/unit/test_new.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("cut = text[:300]\n", encoding="utf-8")
    assert findings(tmp_path) == ["workers/roles/new.py:1: text[:300]"]


def test_unit_tests_mirror_the_tree() -> None:
    """``tests/unit/<package path>/test_<module>.py``: a module's tests are found where the module is; only
    whole-tree rules (this file) sit at the top."""
    unit = ROOT / "tests" / "unit"
    misplaced = sorted(
        str(p.relative_to(unit))
        for p in unit.rglob("test_*.py")
        if (p.parent == unit and p.name != Path(__file__).name)
        or (p.parent != unit and not (ROOT / p.parent.relative_to(unit)).is_dir())
    )
    assert not misplaced, misplaced


def lint_imports(tmp_path: Path, extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the project's own guest contract, on a copy of ``guest/`` plus ``extra`` modules
    (the rest of the tree as it is)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (guest,) = [c for c in project["contracts"] if c.get("source_modules") == ["guest"]]
    shutil.copytree(ROOT / "guest", tmp_path / "guest")
    for name, source in extra.items():
        (tmp_path / "guest" / name).write_text(source, encoding="utf-8")
    config = tmp_path / "importlinter.toml"
    lines = [
        "[tool.importlinter]",
        f"root_packages = {json.dumps(project['root_packages'])}",
        "[[tool.importlinter.contracts]]",
        *(f"{key} = {json.dumps(value)}" for key, value in guest.items()),
    ]
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(lint), str(config), "--no-cache"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )


def test_lint_imports_refuses_a_guest_module_that_imports_first_party_code(tmp_path: Path) -> None:
    """``make lint`` runs ``lint-imports``: the guest contract holds for the tree, and a guest module that
    imports one of the host's packages breaks it (named in the output)."""
    clean = lint_imports(tmp_path / "clean", {})
    assert clean.returncode == 0, clean.stdout + clean.stderr
    broken = lint_imports(tmp_path / "broken", {"leaky.py": "from schemas.text import is_clean_text\n"})
    assert broken.returncode != 0, broken.stdout
    assert "guest.leaky -> schemas.text" in broken.stdout, broken.stdout


def conflict_markers(paths: list[Path]) -> list[str]:
    """Lines a merge left behind (``<<<<<<<``, ``=======``, ``>>>>>>>`` at a line's start): ``path:line``."""
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if line.startswith(("<<<<<<< ", ">>>>>>> ")) or line == "=======":
                found.append(f"{path}:{number}")
    return found


def test_no_merge_left_its_conflict_markers_in_the_tree() -> None:
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    texts = [ROOT / name for name in tracked.decode().split("\0") if name.endswith((".py", ".md", ".yml", ".yaml",
             ".toml", ".json", ".cfg", ".txt")) and (ROOT / name).is_file()]  # fmt: skip
    assert texts, "git ls-files listed no text file"
    assert conflict_markers(texts) == []


def test_conflict_markers_are_found(tmp_path: Path) -> None:
    marked = tmp_path / "merged.md"
    marked.write_text("a\n<<<<<<< HEAD\nb\n=======\nc\n>>>>>>> branch\n======== a rule\n", encoding="utf-8")
    assert conflict_markers([marked]) == [f"{marked}:{n}" for n in (2, 4, 6)]
