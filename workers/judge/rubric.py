"""The built-in rubric judge: deterministic, no model, the local default.

Why it exists: the pipeline (and its tests) must run end to end without a GPU, and a deterministic judge
makes replays diffable. It only looks at the code's shape (a small, gameable signal by design; the hidden
tests carry the reward): does it parse, define the entry point with a real body, avoid hack patterns, stay
a reasonable size, explain itself.
"""

from __future__ import annotations

import ast
import threading
import time

from schemas.caps import fit
from schemas.events import JudgeScore
from workers.grading.static_analysis import analyze, hack_rules
from workers.judge.base import JudgeOutcome, JudgeRequest

RUBRIC_MODEL = "rubric-builtin/1"
RUBRIC_PROMPT_VERSION = "rubric/1"
MAX_REASONABLE_LINES = 200

#: (criterion, weight); weights sum to 1.
CRITERIA: tuple[tuple[str, float], ...] = (
    ("defines the entry point", 0.3),
    ("the entry point has a real body", 0.3),
    ("no hack patterns", 0.2),
    ("reasonable size", 0.1),
    ("documented", 0.1),
)


def _is_stub(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A body that only passes, raises, returns a constant or is a docstring does not try to solve anything."""
    body = [s for s in func.body if not (_is_text(s) or isinstance(s, ast.Import | ast.ImportFrom))]
    if not body:
        return True
    if len(body) != 1:
        return False
    only = body[0]
    if isinstance(only, ast.Pass | ast.Raise):
        return True
    return isinstance(only, ast.Return) and (only.value is None or isinstance(only.value, ast.Constant))


def _is_text(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)


def _documented(func: ast.FunctionDef | ast.AsyncFunctionDef, code: str) -> bool:
    """A docstring (wherever the prompt put it) or a comment."""
    return any(_is_text(s) for s in func.body) or "#" in code


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


class RubricJudge:
    """Scores code on ``CRITERIA``; same code, same score, always."""

    model = RUBRIC_MODEL
    prompt_version = RUBRIC_PROMPT_VERSION

    def __init__(self) -> None:
        # CPython 3.11 can raise "AST constructor recursion depth mismatch" when threads build ASTs at once
        # (gh-106905); scoring takes well under a millisecond, so callers take turns.
        self._lock = threading.Lock()

    def score(self, request: JudgeRequest) -> JudgeOutcome:
        """Sum of the weights of the criteria the code meets, with the unmet ones as the rationale."""
        with self._lock:
            return self._score(request)

    def _score(self, request: JudgeRequest) -> JudgeOutcome:
        started = time.perf_counter()
        try:
            tree = ast.parse(request.code)
        except (SyntaxError, ValueError) as exc:
            return self._outcome(
                0.0, fit(JudgeScore, "rationale", f"does not parse: {type(exc).__name__}: {exc}"), started
            )
        functions = _functions(tree)
        entry = functions.get(request.entry_point) if request.entry_point else next(iter(functions.values()), None)
        met = {
            "defines the entry point": entry is not None,
            "the entry point has a real body": entry is not None and not _is_stub(entry),
            "no hack patterns": not hack_rules(analyze(request.code)),
            "reasonable size": len(request.code.splitlines()) <= MAX_REASONABLE_LINES,
            "documented": entry is not None and _documented(entry, request.code),
        }
        score = round(sum(weight for name, weight in CRITERIA if met[name]), 6)
        missed = [name for name, _ in CRITERIA if not met[name]]
        rationale = "meets every criterion" if not missed else "misses: " + "; ".join(missed)
        return self._outcome(score, rationale, started)

    def _outcome(self, score: float, rationale: str, started: float) -> JudgeOutcome:
        return JudgeOutcome(
            score=min(1.0, max(0.0, score)),
            rationale=rationale,
            error=None,
            model=self.model,
            prompt_version=self.prompt_version,
            latency_ms=(time.perf_counter() - started) * 1000,
        )

    def close(self) -> None:
        """Nothing to release."""
