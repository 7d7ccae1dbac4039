"""The built-in rubric judge: deterministic, no model, the local default.

Why it exists: the pipeline (and its tests) must run end to end without a GPU, and a deterministic judge
makes replays diffable. It only looks at the code's shape (a small, gameable signal by design; the hidden
tests carry the reward): does it parse, define the entry point with a real body, avoid hack patterns, stay
a reasonable size, explain itself. An agent episode's request also has its transcript: a fifth of its score is
whether the agent checked its last change (a command after its last write exited 0).
"""

from __future__ import annotations

import ast
import threading
import time

from schemas.caps import fit
from schemas.events import JudgeScore
from workers import python_ast
from workers.grading.static_analysis import analyze, hack_rules
from workers.judge.base import JudgeOutcome, JudgeRequest

RUBRIC_MODEL = "rubric-builtin/1"
RUBRIC_PROMPT_VERSION = "rubric/1"
#: The rubric of an agent episode's submit: the code criteria, and the transcript's.
EPISODE_PROMPT_VERSION = "rubric/1+transcript/1"
#: Share of an episode's score the transcript gives (the code criteria share the rest in their proportions).
TRANSCRIPT_WEIGHT = 0.2
#: The transcript's criterion: the agent ran a command after its last write and it succeeded.
CHECKED_CHANGE = "checked its last change: a command after its last write exited 0"
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


def checked_last_change(request: JudgeRequest) -> bool:
    """Whether the episode's transcript has an exec that exited 0 after its last write (after the start, when it
    wrote nothing); a transcript whose start was cut off counts its kept part."""
    steps = request.transcript or ()
    writes = [step.turn for step in steps if step.action == "write" and step.status == "ok"]
    after = max(writes, default=-1)
    return any(s.action == "exec" and s.status == "ok" and s.exit_code == 0 and s.turn > after for s in steps)


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
            tree = python_ast.parse(request.code)
        except (SyntaxError, ValueError) as exc:
            why = fit(JudgeScore, "rationale", f"does not parse: {type(exc).__name__}: {exc}")
            return self._outcome(0.0, why, started, request)
        functions = _functions(tree)
        entry = functions.get(request.entry_point) if request.entry_point else next(iter(functions.values()), None)
        met = {
            "defines the entry point": entry is not None,
            "the entry point has a real body": entry is not None and not _is_stub(entry),
            "no hack patterns": not hack_rules(analyze(request.code)),
            "reasonable size": len(request.code.splitlines()) <= MAX_REASONABLE_LINES,
            "documented": entry is not None and _documented(entry, request.code),
        }
        score = sum(weight for name, weight in CRITERIA if met[name])
        missed = [name for name, _ in CRITERIA if not met[name]]
        if request.transcript is not None:  # an episode: (1 - w) of the code's score, w of its process
            checked = checked_last_change(request)
            score = (1 - TRANSCRIPT_WEIGHT) * score + (TRANSCRIPT_WEIGHT if checked else 0.0)
            missed += [] if checked else [CHECKED_CHANGE]
        rationale = "meets every criterion" if not missed else "misses: " + "; ".join(missed)
        return self._outcome(round(score, 6), rationale, started, request)

    def _outcome(
        self, score: float, rationale: str, started: float, request: JudgeRequest | None = None
    ) -> JudgeOutcome:
        episode = request is not None and request.transcript is not None
        return JudgeOutcome(
            score=min(1.0, max(0.0, score)),
            rationale=rationale,
            error=None,
            model=self.model,
            prompt_version=EPISODE_PROMPT_VERSION if episode else self.prompt_version,
            latency_ms=(time.perf_counter() - started) * 1000,
        )

    def close(self) -> None:
        """Nothing to release."""
