"""The workspace a grading run sees: the agent's final snapshot with every protected path reset to the task's.

Why: an agent that may edit its workspace may also edit what grades it (the tests, ``conftest.py``, a ``*.pth``
or ``sitecustomize.py`` that runs before any test). Before any grading run, every path a protected glob
matches is put back as the original workspace had it, and protected paths the original did not have are
deleted. The final snapshot is hostile: a protected file's parent may have become a symlink or a file
(``tests`` -> ``/``), a protected file a directory, a package or a pyc named like a protected module. Both
snapshots are restored with ``snapshot.unpack`` (its checks) into a private scratch directory no process runs
in; there every change is an unlink, ``rmtree`` or exclusive create that never follows a link, and the result
is packed again by ``snapshot.pack`` (canonical bytes, content address). Globs match like gitignore
(``schemas.globs``). This covers what loads first (config, conftest, hooks, compiled code); the code under
test is the agent's and runs in the grading sandbox like any candidate's.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from schemas.globs import PathWalk, is_protected
from workers.episodes.snapshot import Caps, Packed, SnapshotError, pack, unpack

#: Protected in every workspace task, whatever it lists: what python or pytest loads before, or instead of, the
#: code under test. Compiled code (a ``__pycache__`` pyc pytest or the import system takes for a protected
#: module's source), pytest's config in each name it reads (``pytest.toml`` comes before ``pytest.ini``),
#: interpreter hooks, and package metadata (a ``*.dist-info`` entry point is a pytest plugin pytest loads).
ALWAYS_PROTECTED = (
    "**/__pycache__", "**/*.pyc", "**/*.pyo",
    "**/conftest.py", "**/sitecustomize.py", "**/usercustomize.py", "**/*.pth",
    "**/pytest.toml", "**/.pytest.toml", "**/pytest.ini", "**/.pytest.ini", "**/tox.ini", "**/setup.cfg",
    "**/pyproject.toml",
    "**/*.dist-info", "**/*.egg-info", "**/*.egg-link",
)  # fmt: skip
#: Names checked below a link or file that stands where a directory may be: anything a pattern protects inside
#: it (``tests/**``, ``__pycache__/``, ``tests/*.py``) must not be reachable through it.
_PROBES = ("x", "x.py")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def protection(task_globs: Sequence[str]) -> tuple[str, ...]:
    """Every glob a graded workspace resets: ``ALWAYS_PROTECTED``, the task's, and for each protected Python
    module ``X.py`` its whole module name (``X/``, ``X.*``: a package or a compiled module named like it is
    imported instead of the file)."""
    globs = [*ALWAYS_PROTECTED, *task_globs]
    families = [g[: -len(".py")] + suffix for g in globs if g.endswith(".py") for suffix in ("", ".*")]
    return tuple(dict.fromkeys([*globs, *families]))


def graded_workspace(final: bytes, original: bytes, task_globs: Sequence[str], caps: Caps) -> Packed:
    """``final`` with every path ``protection(task_globs)`` matches reset to ``original`` (both snapshots).
    SnapshotError if either is not a snapshot (the final is the agent's: its failure). The result may exceed
    ``caps`` by what the original's protected entries hold, so an agent cannot make its own grading fail by
    filling the workspace before the originals come back."""
    protected = protection(task_globs)
    with tempfile.TemporaryDirectory(prefix="rs-protect-") as scratch:
        work, base = Path(scratch, "final"), Path(scratch, "original")
        work.mkdir()
        base.mkdir()
        unpack(final, work, caps)
        unpack(original, base, caps)
        try:
            _remove_protected(work, protected)
            restored = _protected_entries(base, protected)
            for rel, kind in restored:
                _restore(work, base, rel, kind)
        except OSError as exc:
            raise SnapshotError(f"cannot reset the protected paths: {exc}") from exc
        extra_bytes = sum(os.lstat(base / rel).st_size for rel, kind in restored if kind == "file")
        return pack(work, Caps(caps.max_bytes + extra_bytes, caps.max_entries + len(restored)))


def _remove_protected(root: Path, protected: Sequence[str]) -> None:
    """Delete every protected path under ``root`` (a matched directory with all it holds); links are unlinked,
    never followed. No recursion: the open directories of the current path wait on a stack with their
    listings, each name is looked up in its parent's fd and matched from its parent's ``PathWalk``, so an
    entry costs the same at any depth."""
    root_fd = os.open(root, _DIR_FLAGS)
    stack = [(root_fd, PathWalk.start(protected), sorted(os.listdir(root_fd), reverse=True))]
    try:
        while stack:
            dir_fd, walk, names = stack[-1]
            if not names:
                os.close(stack.pop()[0])
                continue
            name = names.pop()
            here = walk.child(name)
            mode = os.lstat(name, dir_fd=dir_fd).st_mode
            if here.protected or (not stat.S_ISDIR(mode) and any(here.child(p).protected for p in _PROBES)):
                _delete(name, mode, dir_fd)
            elif stat.S_ISDIR(mode):
                stack.append((os.open(name, _DIR_FLAGS, dir_fd=dir_fd), here, []))
                stack[-1][2].extend(sorted(os.listdir(stack[-1][0]), reverse=True))
    finally:
        for dir_fd, _, _ in stack:
            os.close(dir_fd)


def _delete(path: Path | str, mode: int, dir_fd: int | None = None) -> None:
    if stat.S_ISDIR(mode):
        shutil.rmtree(path, dir_fd=dir_fd)  # fd-based: a link inside is removed, not followed
    else:
        os.unlink(path, dir_fd=dir_fd)


def _protected_entries(base: Path, protected: Sequence[str]) -> list[tuple[str, str]]:
    """The original's protected entries, parents before children: (relative path, "dir" | "file" | "link")."""
    found: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        rel_dir = os.path.relpath(dirpath, base)
        for name in dirnames + filenames:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if not is_protected(rel, protected):
                continue
            mode = os.lstat(base / rel).st_mode
            kind = "link" if stat.S_ISLNK(mode) else "dir" if stat.S_ISDIR(mode) else "file"
            found.append((rel, kind))
    found.sort(key=lambda entry: PurePosixPath(entry[0]).parts)
    return found


def _restore(work: Path, base: Path, rel: str, kind: str) -> None:
    """Put the original's entry ``rel`` into ``work``; whatever stands in the way (a non-directory parent, an
    entry at its path) is removed first."""
    parts = PurePosixPath(rel).parts
    for depth in range(1, len(parts)):
        parent = work.joinpath(*parts[:depth])
        mode = _lmode(parent)
        if mode is not None and not stat.S_ISDIR(mode):
            parent.unlink()  # a link or file where the original has a directory
            mode = None
        if mode is None:
            parent.mkdir(0o755)
    target = work / rel
    mode = _lmode(target)
    if kind == "dir":
        if mode is not None and not stat.S_ISDIR(mode):
            target.unlink()
            mode = None
        if mode is None:
            target.mkdir(0o755)
        return
    if mode is not None:
        _delete(target, mode)
    source = base / rel
    if kind == "link":
        os.symlink(os.readlink(source), target)
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    data = _read_nofollow(source)
    fd = os.open(target, flags, stat.S_IMODE(os.lstat(source).st_mode))
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _read_nofollow(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with os.fdopen(fd, "rb", closefd=False) as source:
            return source.read()
    finally:
        os.close(fd)


def _lmode(path: Path) -> int | None:
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None
