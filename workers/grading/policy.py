"""The interim default reward policy, until the reward processor's versioned policies exist.

Why so blunt: a reward must never be earned by a partial or gamed run. 1.0 only when every public and
hidden case passed AND no gating hack-severity static flag was raised; otherwise 0.0. Every decision lists
reasons.

One exception, ``IO_SELF_ONLY_RULES`` for tasks whose suites are all ``io``: there every case is a fresh
program whose stdout and exit status are compared outside the sandbox, so ending early (``sys.exit(0)``, a
common idiom) or resetting a signal disposition can only hurt the program's own output. Those flags are then
listed as reasons but do not gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workers.grading.static_analysis import Flag, hack_rules

POLICY_NAME = "grader-default"
POLICY_VERSION = "2"
#: Hack rules that cannot forge a pass when every suite is ``io`` (they only affect the program's own output).
IO_SELF_ONLY_RULES = frozenset({"exit_call", "signal_tricks"})


@dataclass(frozen=True, slots=True)
class RewardDecision:
    """The reward, the hack rules that gated it, and why."""

    reward: float
    flags: tuple[str, ...]
    reasons: tuple[str, ...]


def default_reward(
    status: str, passed: int, total: int, flags: Sequence[Flag], *, io_only: bool = False
) -> RewardDecision:
    """1.0 iff ``status == "pass"`` (all cases passed), ``total > 0`` and no gating hack flag; else 0.0.

    ``io_only``: every suite of the task is ``io``; then ``IO_SELF_ONLY_RULES`` are reasons, not gates.
    """
    raised = hack_rules(flags)
    hacks = tuple(r for r in raised if not (io_only and r in IO_SELF_ONLY_RULES))
    reasons: list[str] = []
    if status == "sandbox_error":
        reasons.append("sandbox_error: the infrastructure failed; this is not a verdict on the code")
    elif status != "pass":
        reasons.append(f"tests: {passed}/{total} cases passed")
    elif total == 0:
        reasons.append("no test cases: nothing proves the code works")
    reasons.extend(f"hack flag: {rule}" for rule in hacks)
    reasons.extend(
        f"flag not gating (io-only task: it can only change the program's own output): {rule}"
        for rule in raised
        if rule not in hacks
    )
    ok = status == "pass" and total > 0 and not hacks
    if ok:
        reasons.append(f"all {total} cases passed, no hack flags")
    return RewardDecision(1.0 if ok else 0.0, hacks, tuple(reasons))
