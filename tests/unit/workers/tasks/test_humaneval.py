"""HumanEval conversion without a sandbox: AST extraction of literal calls, splitting, assert fallback.

The expected values here come from a stand-in reference with fixed answers; the real conversion (canonical
solution run in the sandbox) is exercised in tests/integration/test_tasks_cli.py.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from schemas.tasks import AssertSuite, CallSuite, Limits, Task
from workers.tasks.humaneval import (
    CallInputCase,
    ConversionError,
    Problem,
    assert_code,
    convert_problem,
    extract_calls,
    load_problems,
    public_count,
    to_json_value,
)

TEST = textwrap.dedent("""
    METADATA = {}

    def check(candidate):
        assert candidate([1, 2], 3) == 5
        assert abs(candidate(1.5) - 0.5) < 1e-3
        assert candidate((1, 2), k=3)
        assert not candidate("x")
        assert candidate(0) is True
        assert tuple(candidate([3])) == (3,)
        assert 7 == candidate(7)
        assert candidate([1, 2], 3) == 5, "duplicate"
        assert sorted(candidate([2, 1])) == [1, 2]
        assert candidate({1: "a"}) == 1
        assert candidate(1 + x) == 2
        assert len(candidate("ab")) == 2
        for i in range(3):
            assert candidate(4) == 4
""")


def test_extracts_every_supported_literal_form() -> None:
    ex = extract_calls(TEST)
    assert [(c.args, c.kwargs) for c in ex.calls] == [
        ([[1, 2], 3], {}),
        ([1.5], {}),
        ([[1, 2]], {"k": 3}),  # tuples become lists: JSON has no tuples
        (["x"], {}),
        ([0], {}),
        ([[3]], {}),
        ([7], {}),
    ]
    assert ex.calls[0].literal_expected == 5
    assert ex.calls[1].tolerance == 1e-3
    assert ex.calls[2].truthy is True
    assert ex.calls[3].truthy is False
    assert ex.calls[4].literal_expected is True
    assert ex.atol == 1e-3
    assert ex.skipped == (
        "line 12: duplicate of an earlier call",
        "line 13: not a literal-call assert form",
        "line 14: arguments are not representable as JSON",
        "line 15: arguments are not literals",
        "line 16: not a literal-call assert form",
        "line 18: inside a loop or condition",
    )


def test_check_is_required() -> None:
    with pytest.raises(ConversionError, match="exactly one check"):
        extract_calls("def test(candidate):\n    assert candidate(1) == 1\n")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ((1, (2, 3)), (True, [1, [2, 3]])),
        ({"a": (1,)}, (True, {"a": [1]})),
        ({1: "a"}, (False, None)),
        ({1, 2}, (False, None)),
        (float("nan"), (False, None)),
        (b"x", (False, None)),
        (None, (True, None)),
    ],
)
def test_to_json_value(value: Any, expected: tuple[bool, Any]) -> None:
    assert to_json_value(value) == expected


@pytest.mark.parametrize(("n", "public"), [(0, 0), (1, 0), (2, 1), (3, 1), (7, 2), (9, 3), (10, 3)])
def test_a_third_is_public_and_one_stays_hidden(n: int, public: int) -> None:
    assert public_count(n) == public


@dataclass(frozen=True)
class Value:
    ok: bool
    value: Any = None
    error: str | None = None


class FixedReference:
    """Stand-in for the sandbox: answers from a table, records what it was asked."""

    def __init__(self, answers: Mapping[str, Value]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, list[Any]]] = []

    def values(
        self, code: str, entry_point: str, cases: Sequence[CallInputCase], limits: Limits
    ) -> Mapping[str, Value]:
        self.asked.extend((c.id, c.args) for c in cases)
        return {c.id: self.answers[c.id] for c in cases if c.id in self.answers}

    def verify(self, task: Task, code: str) -> str | None:
        return None


PROBLEM = Problem(
    task_id="HumanEval/999",
    prompt='def f(x):\n    """doc"""\n',
    entry_point="f",
    canonical_solution="    return x + 1\n",
    test=textwrap.dedent("""
        def check(candidate):
            assert candidate(1) == 2
            assert candidate(2) == 999
            assert candidate(3) == 4
            assert candidate(4) == 5
    """),
)


def test_expected_values_come_from_the_reference_not_the_test() -> None:
    ref = FixedReference({"0": Value(True, 2), "1": Value(True, 3), "2": Value(True, 4), "3": Value(False, error="x")})
    task, report = convert_problem(PROBLEM, ref, Limits())
    assert ref.asked == [("0", [1]), ("1", [2]), ("2", [3]), ("3", [4])]
    assert isinstance(task.public_tests, CallSuite)
    assert isinstance(task.hidden_tests, CallSuite)
    assert [(c.id, c.expected) for c in task.public_tests.cases] == [("0", 2)]
    assert [(c.id, c.expected) for c in task.hidden_tests.cases] == [("1", 3), ("2", 4)]
    assert len(report.literal_mismatches) == 1
    assert report.literal_mismatches[0].startswith("line 4: test literal differs (")
    assert report.dropped == ("line 6: canonical solution gave no plain value (x)",)
    assert (report.kind, report.public, report.hidden) == ("call", 1, 2)


def test_no_reference_values_is_an_error() -> None:
    with pytest.raises(ConversionError, match="no call case has a reference value"):
        convert_problem(PROBLEM, FixedReference({}), Limits())


def test_assert_fallback_carries_prompt_helpers() -> None:
    problem = Problem(
        task_id="HumanEval/998",
        prompt='import math\n\n\ndef helper(s):\n    return s[::-1]\n\n\ndef g(s):\n    """doc"""\n',
        entry_point="g",
        canonical_solution="    return helper(s)\n",
        test="def check(candidate):\n    for s in ['ab', 'cd']:\n        assert candidate(helper(s)) == s\n",
    )
    code = assert_code(problem)
    assert code.startswith("import math\n\ndef helper(s):\n    return s[::-1]\n\ndef check(candidate):")
    assert "def g(" not in code
    task, report = convert_problem(problem, FixedReference({}), Limits())
    assert isinstance(task.hidden_tests, AssertSuite)
    assert task.public_tests is None
    assert report.kind == "assert"


def test_packaged_dataset_extraction() -> None:
    problems = load_problems()
    assert len(problems) == 164
    without_calls = [p.task_id for p in problems if not extract_calls(p.test).calls]
    assert without_calls == ["HumanEval/32", "HumanEval/38", "HumanEval/50"]
    total = sum(len(extract_calls(p.test).calls) for p in problems)
    assert total > 1000
