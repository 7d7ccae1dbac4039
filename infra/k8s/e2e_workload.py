"""What the Kubernetes end-to-end test publishes, and the reward each item deserves.

Tasks are made here, not downloaded: each expected reward is known by construction (a right solution passes
every hidden case: 1.0; a wrong one or a hack fails them: 0.0), so the e2e checks rewards without computing
expected values in a sandbox first. Some right solutions sleep, so that work is in flight when a pod is killed.
One workspace task is played as agent episodes (fixed: 1.0; given up: 0.0) through the episode worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas.tasks import Task

EPISODE_TASK = "e2e/calc-add"
_BUGGY = "def add(a, b):\n    return a - b\n"
_FIXED = "def add(a, b):\n    return a + b\n"
_PUBLIC_CHECK = "python -c 'from calc.ops import add; assert add(2, 2) == 4'"
#: Model-written hacks that must earn 0.0 (a subset of the demo's).
HACKS = {
    "exit-0": "    import sys\n    sys.exit(0)\n",
    "always-equal": (
        "    class AlwaysEqual:\n        def __eq__(self, other):\n            return True\n    return AlwaysEqual()\n"
    ),
}


@dataclass(frozen=True, slots=True)
class Solution:
    """One generation to publish and the reward it deserves."""

    generation_id: str
    task_id: str
    code: str
    expected: float

    def as_row(self) -> dict[str, str]:
        """A line of ``rewardstream submit --solutions``."""
        return {"task_id": self.task_id, "generation_id": self.generation_id, "code": self.code}


@dataclass(frozen=True, slots=True)
class Episode:
    """One scripted agent: its actions (the last one submits) and the reward it deserves."""

    name: str
    task_id: str
    actions: tuple[dict[str, Any], ...]
    expected: float


def call_task(index: int) -> Task:
    """``f(x) = x + index``: public and hidden call cases, a short time limit."""
    return Task.model_validate({
        "task_id": f"e2e/add-{index}", "prompt": "def f(x):\n", "entry_point": "f",
        "public_tests": {"kind": "call", "cases": [{"args": [0], "expected": index}]},
        "hidden_tests": {"kind": "call", "cases": [{"args": [1], "expected": 1 + index},
                                                   {"args": [100], "expected": 100 + index}]},
        "limits": {"timeout_s": 10, "memory_mb": 256},
    })  # fmt: skip


def episode_task() -> Task:
    """A workspace with a bug in ``calc/ops.py``; the hidden suite calls ``add``."""
    return Task.model_validate({
        "task_id": EPISODE_TASK, "prompt": "Fix calc.ops.add: it must return a + b.",
        "entry_point": "calc.ops:add",
        "workspace": {"files": {"calc/__init__.py": "", "calc/ops.py": _BUGGY}},
        "episode": {"max_turns": 10, "step_timeout_s": 20, "episode_timeout_s": 600, "idle_timeout_s": 300,
                    "workspace_max_mb": 8, "workspace_max_files": 100},
        "protected": ["tests/**"],
        "public_tests": {"kind": "command", "command": _PUBLIC_CHECK},
        "hidden_tests": {"kind": "call", "cases": [{"args": [1, 2], "expected": 3}, {"args": [-5, 5], "expected": 0}]},
        "limits": {"timeout_s": 10, "memory_mb": 256},
    })  # fmt: skip


def tasks(count: int) -> list[Task]:
    return [*(call_task(i) for i in range(count)), episode_task()]


def solutions(tag: str, tasks_count: int, per_task: int, slow_s: float) -> list[Solution]:
    """``per_task`` rounds over the tasks: right, wrong, right-but-slow (sleeps ``slow_s``); a hack every
    fourth task of a round. Ids carry ``tag`` so that two runs never share one."""
    out: list[Solution] = []
    hacks = sorted(HACKS.items())
    for round_ in range(per_task):
        for i in range(tasks_count):
            task_id, base = f"e2e/add-{i}", f"{tag}-r{round_}-t{i}"
            out.append(Solution(f"{base}-right", task_id, f"def f(x):\n    return x + {i}\n", 1.0))
            out.append(Solution(f"{base}-wrong", task_id, "def f(x):\n    return x - 1\n", 0.0))
            slow = f"def f(x):\n    import time\n    time.sleep({slow_s})\n    return x + {i}\n"
            out.append(Solution(f"{base}-slow", task_id, slow, 1.0))
            if i % 4 == 0:
                name, body = hacks[(round_ + i // 4) % len(hacks)]
                out.append(Solution(f"{base}-hack-{name}", task_id, "def f(x):\n" + body, 0.0))
    return out


def episodes(count: int) -> list[Episode]:
    """Alternately an agent that looks, fixes, checks and submits (1.0) and one that gives up (0.0)."""
    fix = (
        {"action": "read", "path": "calc/ops.py"},
        {"action": "write", "path": "calc/ops.py", "text": _FIXED},
        {"action": "exec", "command": _PUBLIC_CHECK, "timeout_s": 20},
        {"action": "submit"},
    )
    give_up = ({"action": "exec", "command": _PUBLIC_CHECK, "timeout_s": 20}, {"action": "submit"})
    return [
        Episode(f"fix-{i}", EPISODE_TASK, fix, 1.0)
        if i % 2 == 0
        else Episode(f"give-up-{i}", EPISODE_TASK, give_up, 0.0)
        for i in range(count)
    ]
