"""The grader's old interim reward rule, kept only as a test oracle for the pipeline policy that replaced it.

1.0 iff ``status == "pass"`` (every case passed), ``total > 0`` and no gating hack-severity flag, else 0.0;
when every suite is ``io``, ``exit_call`` and ``signal_tricks`` do not gate.
"""

from __future__ import annotations

from collections.abc import Iterable

from workers.grading.static_analysis import RULES

IO_SELF_ONLY_RULES = frozenset({"exit_call", "signal_tricks"})


def interim_reward(
    status: str, total: int, rules: Iterable[str], *, io_only: bool = False
) -> tuple[float, tuple[str, ...]]:
    """(reward, the hack rules that gated it, sorted) as the interim policy decided."""
    hacks = tuple(sorted({r for r in rules if RULES[r][0] == "hack" and not (io_only and r in IO_SELF_ONLY_RULES)}))
    return (1.0 if status == "pass" and total > 0 and not hacks else 0.0), hacks
