"""What each walk of a workspace tree costs, counted: ``python -m tests.unit.walk_costs DEPTH`` prints JSON.

The tree is a chain of DEPTH directories with a file at every level (2 * DEPTH entries), built here on the
host by this program (nothing hostile runs). For each walk (the step runner's restore, which the grading
harness also uses, and its pack; ``snapshot.unpack`` and ``pack``; ``protect.graded_workspace``) it counts
the Python and C function calls made (``sys.setprofile``) and the audited filesystem calls whose path holds a
``/`` (``sys.addaudithook``): a call that resolves a long path costs the kernel the path's depth. A walk is
linear when the first count per entry does not grow with DEPTH and the second stays the same small number.
Run as its own process: an audit hook cannot be removed, and a profiler would slow the test process down.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from guest import workspace_snapshot
from workers.episodes.protect import graded_workspace
from workers.episodes.snapshot import Caps, pack, unpack

#: Audited calls that take a path (the path is their first argument; ``os.symlink``'s link is its second).
AUDITED = frozenset({"open", "os.mkdir", "os.rmdir", "os.remove", "os.symlink", "os.chmod", "os.listdir", "os.scandir"})


class Counter:
    def __init__(self) -> None:
        self.calls = 0
        self.long_paths: list[str] = []
        self.on = False

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            self.calls += 1

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self.on and event in AUDITED:
            path = args[1] if event == "os.symlink" else args[0]
            if isinstance(path, str | bytes | os.PathLike) and "/" in os.fsdecode(path):
                self.long_paths.append(os.fsdecode(path)[-60:])

    def count(self, walk: Callable[[], object]) -> dict[str, Any]:
        self.calls, self.long_paths, self.on = 0, [], True
        sys.setprofile(self.profile)
        try:
            walk()
        finally:
            sys.setprofile(None)
            self.on = False
        return {"calls": self.calls, "long_paths": self.long_paths}


def in_dir(path: Path, walk: Callable[[], object]) -> Callable[[], None]:
    """``walk`` run with ``path`` as the cwd (the runner's restore and pack work on theirs)."""

    def run() -> None:
        old = os.getcwd()
        os.chdir(path)
        try:
            walk()
        finally:
            os.chdir(old)

    return run


def main(depth: int) -> dict[str, Any]:
    caps = Caps(max_bytes=1 << 20, max_entries=2 * depth + 10)
    counter = Counter()
    sys.addaudithook(counter.audit)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        level = root / "src"
        for _ in range(depth):
            (level / "d").mkdir(parents=True)
            (level / "f.py").write_text("x = 1\n")
            level /= "d"
        (root / "original" / "tests").mkdir(parents=True)
        (root / "original" / "tests" / "test_x.py").write_text("x = 1\n")
        original = pack(root / "original", caps).data
        tar = pack(root / "src", caps).data
        for name in ("restored", "unpacked"):
            (root / name).mkdir()
        packer = workspace_snapshot.Packer(caps.max_bytes, caps.max_entries, 1 << 30)
        walks: dict[str, Callable[[], object]] = {
            "step_runner.restore": in_dir(root / "restored", lambda: workspace_snapshot.restore(tar)),
            "step_runner.Packer": in_dir(root / "src", packer.pack),
            "snapshot.unpack": lambda: unpack(tar, root / "unpacked", caps),
            "snapshot.pack": lambda: pack(root / "src", caps),
            "protect.graded_workspace": lambda: graded_workspace(tar, original, ["tests/**"], caps),
        }
        return {"entries": 2 * depth, **{name: counter.count(walk) for name, walk in walks.items()}}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]))))
