"""Tasks whose hidden suite only repeats what the public suite already shows.

Why: the reward is built on hidden cases because the policy cannot have seen them. A hidden case whose
input is in the public suite (whose expected value the policy sees in its feedback) gives no hidden
signal; a task whose hidden cases are all like that rewards memorising the public examples. Loading
such a task is a mistake worth a warning, and an error under ``tasks load --strict``.
"""

from __future__ import annotations

import ast
import json

from schemas.tasks import AssertSuite, CallCase, IoCase, Task
from workers import python_ast


def hidden_repeats_public(task: Task) -> str | None:
    """Why ``task``'s hidden cases give no signal beyond its public suite, or None when they do (or when it
    cannot be told: suites of different kinds)."""
    public, hidden = task.public_tests, task.hidden_tests
    if public is None or public.kind != hidden.kind:
        return None
    if isinstance(public, AssertSuite) and isinstance(hidden, AssertSuite):
        same = _code_shape(public.code) == _code_shape(hidden.code)
        return "its hidden check code is the same as its public check code" if same else None
    if isinstance(public, AssertSuite) or isinstance(hidden, AssertSuite):
        return None
    seen = {_case_input(c) for c in public.cases}
    if not hidden.cases:
        return "its hidden suite has no cases"
    if all(_case_input(c) in seen for c in hidden.cases):
        return f"all {len(hidden.cases)} of its hidden cases repeat inputs of its public suite"
    return None


def _code_shape(code: str) -> str:
    """Check code without its formatting and comments (its AST), or its stripped text if it does not parse."""
    try:
        return ast.dump(python_ast.parse(code))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code.strip()


def _case_input(case: CallCase | IoCase) -> str:
    """What the candidate is given in a case (its expected value is irrelevant: the input decides)."""
    if isinstance(case, IoCase):
        return "io:" + case.stdin
    return "call:" + json.dumps([case.args, case.kwargs], sort_keys=True, allow_nan=False)
