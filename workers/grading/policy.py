"""The interim default reward policy, until the reward processor's versioned policies exist.

Why so blunt: a reward must never be earned by a partial or gamed run. 1.0 only when every public and
hidden case passed AND no hack-severity static flag was raised; otherwise 0.0. Every decision lists reasons.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workers.grading.static_analysis import Flag, hack_rules

POLICY_NAME = "grader-default"
POLICY_VERSION = "1"


@dataclass(frozen=True, slots=True)
class RewardDecision:
    """The reward, the hack rules that gated it, and why."""

    reward: float
    flags: tuple[str, ...]
    reasons: tuple[str, ...]


def default_reward(status: str, passed: int, total: int, flags: Sequence[Flag]) -> RewardDecision:
    """1.0 iff ``status == "pass"`` (all cases passed), ``total > 0`` and no hack flag; else 0.0."""
    hacks = tuple(hack_rules(flags))
    reasons: list[str] = []
    if status == "sandbox_error":
        reasons.append("sandbox_error: the infrastructure failed; this is not a verdict on the code")
    elif status != "pass":
        reasons.append(f"tests: {passed}/{total} cases passed")
    elif total == 0:
        reasons.append("no test cases: nothing proves the code works")
    reasons.extend(f"hack flag: {rule}" for rule in hacks)
    ok = status == "pass" and total > 0 and not hacks
    if ok:
        reasons.append(f"all {total} cases passed, no hack flags")
    return RewardDecision(1.0 if ok else 0.0, hacks, tuple(reasons))
