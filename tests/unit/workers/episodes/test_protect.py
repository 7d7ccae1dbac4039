"""The graded workspace: protected paths reset to the original, whatever the agent turned them into.

The "agent's" trees here are built by the test itself (links, files where directories were, planted hooks):
nothing hostile runs, these are the shapes a hostile step can leave in its snapshot.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.globs import is_protected
from workers.episodes.protect import graded_workspace, protection
from workers.episodes.snapshot import Caps, SnapshotError, pack, unpack

CAPS = Caps(max_bytes=1 << 20, max_entries=500)
PROTECTED = ("tests/**", "**/conftest.py", "pytest.ini", "**/*.pth", "**/sitecustomize.py")
ORIGINAL = {
    "calc/__init__.py": b"",
    "calc/ops.py": b"def add(a, b):\n    return a - b\n",
    "tests/test_ops.py": b"from calc.ops import add\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    "tests/data/cases.txt": b"1 2 3\n",
    "pytest.ini": b"[pytest]\n",
}


def _parent_ready(root: Path, rel: str) -> bool:
    """Make ``rel``'s parent directories under ``root``; False (make nothing more) when an existing one is not a
    real directory: the test must never create anything through a link (a link to ``/`` would reach the host)."""
    parts = Path(rel).parts
    for depth in range(1, len(parts)):
        parent = root.joinpath(*parts[:depth])
        if parent.is_symlink() or (parent.exists() and not parent.is_dir()):
            return False
        if not parent.exists():
            parent.mkdir()
    target = root / rel
    return not target.is_symlink() and not target.exists()


def _tree(root: Path, files: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    """Files first, then links, each only where nothing stands in its way (one name can't be two things)."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        if _parent_ready(root, rel):
            (root / rel).write_bytes(data)
    for rel, target in (links or {}).items():
        if _parent_ready(root, rel):
            os.symlink(target, root / rel)
    return root


def _snapshot(root: Path) -> bytes:
    return pack(root, CAPS).data


def _listing(data: bytes, tmp: Path) -> dict[str, tuple[str, bytes]]:
    dest = tmp / f"out-{len(list(tmp.iterdir()))}"
    dest.mkdir()
    unpack(data, dest, CAPS)
    out: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(dest):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(dest))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path).encode())
            elif path.is_dir():
                out[rel] = ("dir", b"")
            else:
                out[rel] = ("file", path.read_bytes())
    return out


def _scratch(tmp_path: Path) -> Path:
    scratch = tmp_path / "listings"
    scratch.mkdir(exist_ok=True)
    return scratch


@pytest.fixture
def original(tmp_path: Path) -> bytes:
    return _snapshot(_tree(tmp_path / "original", ORIGINAL))


Listing = dict[str, tuple[str, bytes]]


def _graded(tmp_path: Path, original: bytes, files: dict[str, bytes], links: dict[str, str] | None = None) -> Listing:
    final = _snapshot(_tree(tmp_path / "final", files, links))
    scratch = tmp_path / "listings"
    scratch.mkdir(exist_ok=True)
    return _listing(graded_workspace(final, original, PROTECTED, CAPS).data, scratch)


def _expected_protected(listing: Listing) -> None:
    assert listing["tests/test_ops.py"] == ("file", ORIGINAL["tests/test_ops.py"])
    assert listing["tests/data/cases.txt"] == ("file", ORIGINAL["tests/data/cases.txt"])
    assert listing["pytest.ini"] == ("file", ORIGINAL["pytest.ini"])


def test_a_genuine_fix_is_kept_and_the_tests_are_the_original(tmp_path: Path, original: bytes) -> None:
    fixed = {**ORIGINAL, "calc/ops.py": b"def add(a, b):\n    return a + b\n", "notes.md": b"done\n"}
    listing = _graded(tmp_path, original, fixed)
    assert listing["calc/ops.py"] == ("file", fixed["calc/ops.py"])
    assert listing["notes.md"] == ("file", b"done\n")
    _expected_protected(listing)


def test_edited_and_deleted_tests_are_put_back(tmp_path: Path, original: bytes) -> None:
    hacked = {k: v for k, v in ORIGINAL.items() if not k.startswith("tests/data")}
    hacked["tests/test_ops.py"] = b"def test_add():\n    assert True\n"
    hacked["pytest.ini"] = b"[pytest]\naddopts = -p no:python\n"
    listing = _graded(tmp_path, original, hacked)
    _expected_protected(listing)


def test_planted_hooks_the_original_did_not_have_are_deleted(tmp_path: Path, original: bytes) -> None:
    planted = {
        **ORIGINAL,
        "conftest.py": b"import pytest\n",
        "calc/conftest.py": b"raise SystemExit(0)\n",
        "evil.pth": b"import os\n",
        "deep/er/sitecustomize.py": b"import sys\n",
        "tests/test_extra.py": b"def test_x():\n    pass\n",
    }
    listing = _graded(tmp_path, original, planted)
    for name in ("conftest.py", "calc/conftest.py", "evil.pth", "deep/er/sitecustomize.py", "tests/test_extra.py"):
        assert name not in listing, name
    assert listing["deep/er"] == ("dir", b"")  # unprotected directories stay, only the hook goes
    _expected_protected(listing)


def test_a_protected_directory_replaced_by_a_link_or_a_file_is_a_directory_again(
    tmp_path: Path, original: bytes
) -> None:
    as_link = {k: v for k, v in ORIGINAL.items() if not k.startswith("tests/")}
    listing = _graded(tmp_path, original, as_link, {"tests": "/"})
    assert listing["tests"] == ("dir", b"")
    _expected_protected(listing)

    as_file = {**{k: v for k, v in ORIGINAL.items() if not k.startswith("tests/")}, "tests": b"not a dir"}
    listing = _graded(tmp_path / "again", original, as_file)
    assert listing["tests"] == ("dir", b"")
    _expected_protected(listing)


def test_links_at_protected_paths_are_replaced_not_followed(tmp_path: Path, original: bytes) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"host file\n")
    files = {k: v for k, v in ORIGINAL.items() if k not in ("tests/test_ops.py", "pytest.ini")}
    listing = _graded(tmp_path, original, files, {"tests/test_ops.py": str(outside), "pytest.ini": "/etc/passwd"})
    _expected_protected(listing)
    assert outside.read_bytes() == b"host file\n"  # written through nowhere


def test_a_protected_file_turned_into_a_directory_is_a_file_again(tmp_path: Path, original: bytes) -> None:
    files = {k: v for k, v in ORIGINAL.items() if k != "pytest.ini"}
    files["pytest.ini/inner.txt"] = b"x"
    listing = _graded(tmp_path, original, files)
    assert "pytest.ini/inner.txt" not in listing
    _expected_protected(listing)


def test_without_task_globs_what_python_and_pytest_load_first_is_still_reset(tmp_path: Path, original: bytes) -> None:
    final = _snapshot(_tree(tmp_path / "final", {**ORIGINAL, "conftest.py": b"x", "calc/ops.py": b"fixed"}))
    listing = _listing(graded_workspace(final, original, (), CAPS).data, _scratch(tmp_path))
    assert "conftest.py" not in listing
    assert listing["pytest.ini"] == ("file", ORIGINAL["pytest.ini"])
    assert listing["calc/ops.py"] == ("file", b"fixed")


ORIGINAL_CONFTEST = {**ORIGINAL, "conftest.py": b"# the task's own\n", "calc/sitecustomize.py": b"# task\n"}


@pytest.mark.parametrize(
    ("planted", "links"),
    [
        ({"pytest.toml": b'[pytest]\naddopts = ["-p", "calc.plug"]\n'}, {}),  # read before pytest.ini
        ({".pytest.ini": b"[pytest]\n"}, {}),
        ({"tests/pytest.ini": b"[pytest]\n"}, {}),  # found first for tests under tests/
        ({"__pycache__/conftest.cpython-311-pytest-9.2.0.pyc": b"\x00" * 16}, {}),
        ({"calc/__pycache__/ops.cpython-311.pyc": b"\x00" * 16, "calc/ops.pyc": b"\x00" * 16}, {}),
        ({"stash/conftest.cpython-311-pytest-9.2.0.pyc": b"\x00" * 16}, {"__pycache__": "stash"}),
        ({"conftest/__init__.py": b"__file__ = 'conftest.py'\n"}, {}),  # a package beats conftest.py
        ({"calc/sitecustomize/__init__.py": b"import os\n", "sitecustomize.so": b"\x7fELF"}, {}),
        ({"evil-1.0.dist-info/entry_points.txt": b"[pytest11]\nevil = calc.plug\n"}, {}),
        ({"calc.egg-info/entry_points.txt": b"[pytest11]\nevil = calc.plug\n", "x.egg-link": b"."}, {}),
    ],
)
def test_what_would_load_instead_of_the_protected_originals_is_removed(
    tmp_path: Path, planted: dict[str, bytes], links: dict[str, str]
) -> None:
    """Each of these made pytest or python run the agent's code before (or instead of) the restored originals,
    without touching a protected path of the task's own list."""
    original = _snapshot(_tree(tmp_path / "original", ORIGINAL_CONFTEST))
    final = _snapshot(_tree(tmp_path / "final", {**ORIGINAL_CONFTEST, **planted}, links))
    listing = _listing(graded_workspace(final, original, PROTECTED, CAPS).data, _scratch(tmp_path))
    for name in [*planted, *links]:
        assert name not in listing, name
    assert listing["conftest.py"] == ("file", ORIGINAL_CONFTEST["conftest.py"])
    assert listing["calc/sitecustomize.py"] == ("file", ORIGINAL_CONFTEST["calc/sitecustomize.py"])
    _expected_protected(listing)


def test_an_agent_that_fills_the_workspace_cannot_make_its_grading_fail(tmp_path: Path, original: bytes) -> None:
    """Delete the tests, fill the freed room: putting the originals back goes past the caps, and must not fail."""
    caps = Caps(max_bytes=1 << 20, max_entries=len(ORIGINAL) + 4)
    kept = {k: v for k, v in ORIGINAL.items() if not k.startswith("tests/")}
    filler = {f"f{i}": b"x" for i in range(caps.max_entries - len(kept) - 1)}
    final = pack(_tree(tmp_path / "final", {**kept, **filler}), caps).data
    original = pack(_tree(tmp_path / "o", ORIGINAL), caps).data
    listing = _listing(graded_workspace(final, original, PROTECTED, caps).data, _scratch(tmp_path))
    _expected_protected(listing)
    assert all(f"f{i}" in listing for i in range(len(filler)))


def test_the_result_is_a_canonical_snapshot(tmp_path: Path, original: bytes) -> None:
    final = _snapshot(_tree(tmp_path / "final", {**ORIGINAL, "tests/test_ops.py": b"hacked"}))
    graded = graded_workspace(final, original, PROTECTED, CAPS)
    again = tmp_path / "again"
    again.mkdir()
    unpack(graded.data, again, CAPS)
    assert pack(again, CAPS).data == graded.data
    assert graded_workspace(graded.data, original, PROTECTED, CAPS).sha256 == graded.sha256  # idempotent


def test_a_snapshot_that_is_not_one_is_refused(tmp_path: Path, original: bytes) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(SnapshotError):
        graded_workspace(buffer.getvalue(), original, PROTECTED, CAPS)
    with pytest.raises(SnapshotError):
        graded_workspace(b"garbage" * 100, original, PROTECTED, CAPS)


_NAMES = st.sampled_from(["tests", "calc", "conftest.py", "pytest.ini", "x.pth", "a", "sitecustomize.py", "b.py"])


@given(
    st.dictionaries(st.lists(_NAMES, min_size=1, max_size=3).map("/".join), st.binary(max_size=20), max_size=12),
    st.dictionaries(st.lists(_NAMES, min_size=1, max_size=3).map("/".join), st.sampled_from(["/", "..", "tests"]),
                    max_size=3),
)  # fmt: skip
def test_any_final_tree_grades_with_exactly_the_original_protected_paths(
    files: dict[str, bytes], links: dict[str, str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        original = _snapshot(_tree(tmp / "original", ORIGINAL))
        final_root = _tree(tmp / "final", files, links)
        scratch = tmp / "listings"
        scratch.mkdir()
        graded = _listing(graded_workspace(_snapshot(final_root), original, PROTECTED, CAPS).data, scratch)
        originals = _listing(original, scratch)
        every = protection(PROTECTED)
        assert {k: v for k, v in graded.items() if is_protected(k, every)} == {
            k: v for k, v in originals.items() if is_protected(k, every)
        }
        final = _listing(_snapshot(final_root), scratch)
        for rel, entry in final.items():  # what is not protected, and not in a restored path's way, is kept
            in_the_way = any(o == rel or o.startswith(rel + "/") for o in originals if is_protected(o, every))
            under_protected = any(is_protected(p, every) for p in _prefixes(rel))
            probed = entry[0] != "dir" and any(is_protected(f"{rel}/{probe}", every) for probe in ("x", "x.py"))
            if not (in_the_way or under_protected or probed):
                assert graded.get(rel) == entry, rel


def _prefixes(rel: str) -> list[str]:
    parts = rel.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]
