"""The episode benchmark's arithmetic: an episode is an open (no sandbox run) and 4 sandbox steps, so steps/s
counts 4 an episode, not 5; the slots' busy share is the worker's own handling time over elapsed x slots (its
figures come from `python -m benchmarks.bench_episodes`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def _bench() -> ModuleType:
    """benchmarks/ is a script directory, not an installed package: load the file itself."""
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_episodes.py"
    spec = importlib.util.spec_from_file_location("bench_episodes", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_episodes", module)
    spec.loader.exec_module(module)
    return module


def test_the_open_is_an_action_but_not_a_sandbox_step() -> None:
    got = _bench().rates(episodes=40, elapsed_s=10.0, busy_s=15.0, slots=2)
    assert (got["episodes_per_s"], got["steps_per_s"], got["actions_per_s"]) == (4.0, 16.0, 20.0)
    assert got["slots_busy"] == 0.75  # 15 s of handling in 10 s on 2 slots
