"""Where the task registry keeps each task's versions on disk, and the read-only lookup of a task's latest one.

Why here, in the contracts: the layout is shared by the one writer (``rewardstream tasks load``,
``workers.tasks.registry``) and by every reader, the roles and also the producers that pin a generation to
the latest version when they publish it (the trainer SDK, the gateway; ``streams`` may not import
``workers``). Under the registry's root::

    public/<name>.json                  the latest public view, as before versions (older readers keep reading it)
    hidden/<name>.json                  the latest full task, as before versions
    public/versions/<name>/<v>.json     the public view of version <v> (with its task_version): 0644
    public/versions/<name>/latest       the latest version, 64 hex digits: replaced atomically, last
    hidden/versions/<name>/<v>.json     the full task of version <v>, its bytes' sha256 is <v>: 0600, dirs 0700

``<name>`` is the task id quoted (``HumanEval/0`` -> ``HumanEval%2F0``). A version's files are written once
and never change; a load of a changed task adds a version and moves ``latest``. The pointer is public: a
version names the task's content without revealing it.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from urllib.parse import quote

PUBLIC_DIR = "public"
HIDDEN_DIR = "hidden"
VERSIONS_DIR = "versions"
LATEST = "latest"
#: A version as it appears in a file name and in the pointer: the sha256 hex of the task's wire bytes.
VERSION_RE = re.compile(r"^[0-9a-f]{64}$")
_SAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
#: The pointer is 64 hex digits and a newline; anything longer is not one.
_POINTER_MAX = 128


def file_stem(task_id: str) -> str:
    """The name of a task's files and directories (ids may contain '/', e.g. HumanEval/0): never a path."""
    name = quote(task_id, safe=_SAFE)
    if name in ("", ".", ".."):
        raise ValueError(f"{task_id!r} is not a task id")
    return name


def file_name(task_id: str) -> str:
    """The file name of a task's latest views (``public/<name>.json``, ``hidden/<name>.json``)."""
    return file_stem(task_id) + ".json"


def is_version(value: str) -> bool:
    """Whether ``value`` is a version (64 lowercase hex digits), so it can name a file."""
    return VERSION_RE.fullmatch(value) is not None


def versions_dir(root: Path, task_id: str, *, hidden: bool) -> Path:
    """The directory of a task's versions, public views or full tasks."""
    return root / (HIDDEN_DIR if hidden else PUBLIC_DIR) / VERSIONS_DIR / file_stem(task_id)


def latest_pointer(root: Path, task_id: str) -> Path:
    """The file naming a task's latest version."""
    return versions_dir(root, task_id, hidden=False) / LATEST


def read_latest(root: Path, task_id: str) -> str | None:
    """The version the task's ``latest`` pointer names, or None when it has none (no such task, or one stored
    before versions). Read each time, never cached: a load moves it at any moment. OSError if unreadable."""
    try:
        with latest_pointer(root, task_id).open("rb") as handle:
            data = handle.read(_POINTER_MAX + 1)
    except FileNotFoundError:
        return None
    text = data.strip().decode("ascii", "replace")
    return text if len(data) <= _POINTER_MAX and is_version(text) else None


class LatestVersions:
    """``task_id -> its latest version`` from a registry directory, None when it cannot tell (no such task, a
    task stored before versions, a registry that is not there): what a producer pins a generation to.

    Called once per published generation, so it costs one ``stat`` of the pointer when the pointer has not
    changed (its identity: inode, mtime, size; a load replaces it by a rename, a new inode), and a read when it
    has: never a stale version. Thread-safe."""

    _MEMO = 65_536

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._known: dict[str, tuple[str, tuple[int, int, int] | None, str | None]] = {}
        self._lock = threading.Lock()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LatestVersions) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def __repr__(self) -> str:
        return f"LatestVersions({str(self.root)!r})"

    def __call__(self, task_id: str) -> str | None:
        with self._lock:
            known = self._known.get(task_id)
        if known is None:
            try:
                path = str(latest_pointer(self.root, task_id))
            except ValueError:
                return None
            known = (path, None, None)
        path, identity, version = known
        try:
            info = os.stat(path)
        except OSError:
            self._remember(task_id, path, None, None)
            return None
        now = (info.st_ino, info.st_mtime_ns, info.st_size)
        if now == identity:
            return version
        try:
            version = read_latest(self.root, task_id)
        except OSError:
            return None
        self._remember(task_id, path, now, version)
        return version

    def _remember(self, task_id: str, path: str, identity: tuple[int, int, int] | None, version: str | None) -> None:
        with self._lock:
            if len(self._known) >= self._MEMO:
                self._known.clear()
            self._known[task_id] = (path, identity, version)
