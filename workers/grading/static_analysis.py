"""Static analysis of candidate code (Python ``ast``): flags are reasons, not verdicts.

Why: verdicts are hack-proof by construction (see ``harness``), but a reward policy should still know when
code *tried* to game the grader, so the attempt can cost reward even where it failed. Each flag has a rule
id (the ``StaticFlag.rule`` of ``schemas.events``), a message, a line, and a severity: ``hack`` flags gate
the default reward to 0; ``warn`` flags are only reported (things legitimate solutions sometimes do, such
as ``eval`` in HumanEval/160's canonical solution).

Ruff/bandit are not run: their security rules target different smells (asserts, pickle, weak hashes) and
would cost a subprocess per grade; every hack in the catalogue (``static_rules``) is a direct AST pattern,
found by one walk of the tree (``static_visitor``).
The analysis never executes the code and is bounded (size cap, recursion caught).
"""

from __future__ import annotations

import ast
import threading
from collections import Counter
from collections.abc import Iterable, Sequence

from workers import python_ast
from workers.grading.static_rules import RULES, Flag, Severity, flag
from workers.grading.static_visitor import HackVisitor

__all__ = [
    "MAX_CODE_CHARS",
    "MAX_FLAGS",
    "PARSE_LOCK",
    "RULES",
    "Flag",
    "Severity",
    "analyze",
    "hack_rules",
    "rule_counts",
    "shown_flags",
]

MAX_CODE_CHARS = 512 * 1024
#: Flags *shown* (result files, events); gates always see every finding (``shown_flags``, ``rule_counts``).
MAX_FLAGS = 64


def hack_rules(flags: Iterable[Flag]) -> list[str]:
    """Sorted unique rule ids of the ``hack``-severity flags."""
    return sorted({f.rule for f in flags if f.severity == "hack"})


#: CPython 3.11 can raise "AST constructor recursion depth mismatch" when threads parse at once (gh-106905):
#: every caller (grader threads, verifier runners) takes turns; a parse takes well under a millisecond.
PARSE_LOCK = threading.Lock()


def analyze(code: str) -> list[Flag]:
    """Every finding for ``code``, at most one per (rule, line); never raises.

    Not capped: gates must see every finding (64 harmless ones must never hide a hack). Only what is shown
    is capped, by ``shown_flags``; ``rule_counts`` says how many of each rule there were.
    """
    if len(code) > MAX_CODE_CHARS:
        return [flag("too_large", f"{len(code)} characters", None)]
    try:
        with PARSE_LOCK:
            tree = python_ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        line = getattr(exc, "lineno", None)
        return [flag("syntax_error", f"{type(exc).__name__}: {getattr(exc, 'msg', exc)}", line)]
    visitor = HackVisitor()
    visitor.module_strings = [
        n.value.lower() for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]
    try:
        visitor.visit(tree)
    except RecursionError:
        visitor.add("too_large", "nested too deeply to analyse", None)
    return visitor.flags


def shown_flags(flags: Sequence[Flag], cap: int = MAX_FLAGS) -> list[Flag]:
    """At most ``cap`` of ``flags``, in their order, always including the first finding of every rule
    (hack rules before warn rules when there are more rules than room): a reader of the shown list alone
    still sees every rule that was raised."""
    if len(flags) <= cap:
        return list(flags)
    first: dict[str, int] = {}
    for i, f in enumerate(flags):
        first.setdefault(f.rule, i)
    keep = sorted(first.values(), key=lambda i: (flags[i].severity != "hack", i))[:cap]
    chosen = set(keep)
    for i in range(len(flags)):
        if len(chosen) >= cap:
            break
        chosen.add(i)
    return [flags[i] for i in sorted(chosen)]


def rule_counts(flags: Iterable[Flag]) -> dict[str, int]:
    """How many findings of each rule, sorted by rule id (every finding, shown or not)."""
    return dict(sorted(Counter(f.rule for f in flags).items()))
