"""Deep workspace trees cost every walk the same per entry as shallow ones (issue 24: a 450-level tree made
the step runner's restore cubic, so later steps timed out and an honest fix after it was lost).

Counted, not timed (``tests/unit/walk_costs.py``, run as a child process): the function calls each walk
makes per entry, for a chain twice as deep, and the filesystem calls that resolve a path of more than one
name. Nothing hostile runs here: the trees are made by the counting program itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[4]
#: Depths compared (a 1024-byte path allows about 500 levels).
SHALLOW, DEEP = 150, 300
WALKS = ("step_runner.restore", "step_runner.Packer", "snapshot.unpack", "snapshot.pack", "protect.graded_workspace")


def costs(depth: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tests.unit.walk_costs", str(depth)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout))


@pytest.fixture(scope="module")
def counted() -> dict[int, dict[str, Any]]:
    return {depth: costs(depth) for depth in (SHALLOW, DEEP)}


@pytest.mark.parametrize("walk", WALKS)
def test_a_tree_twice_as_deep_costs_no_more_per_entry(counted: dict[int, dict[str, Any]], walk: str) -> None:
    """Per entry, the calls stay flat (the long names' pax headers add a little); a walk that re-resolved
    paths or matched every path from its root would double them."""
    shallow, deep = counted[SHALLOW], counted[DEEP]
    per_entry = {d: c[walk]["calls"] / c["entries"] for d, c in counted.items()}
    assert deep["entries"] == 2 * shallow["entries"]
    assert per_entry[DEEP] <= 1.15 * per_entry[SHALLOW], per_entry


@pytest.mark.parametrize("walk", WALKS)
def test_no_filesystem_call_resolves_a_path_inside_the_tree(counted: dict[int, dict[str, Any]], walk: str) -> None:
    """Every entry is reached from its parent's fd by its own name: the only multi-name paths are the walk's
    own roots (a temporary directory and its subdirectories), the same few at any depth."""
    shallow, deep = counted[SHALLOW][walk]["long_paths"], counted[DEEP][walk]["long_paths"]
    assert len(deep) == len(shallow) <= 20, deep
    assert not [p for p in deep if "d/d" in p or p.endswith("f.py")], deep
