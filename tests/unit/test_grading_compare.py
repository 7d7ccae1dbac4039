"""Strict comparison outside the sandbox: types are not coerced, NaN/inf never match, reasons never leak."""

from __future__ import annotations

import math

import pytest

from workers.grading.compare import compare_stdout, compare_values, normalize_stdout


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        (1, 1),
        (1, 1.0),
        (1.0, 1),
        (0.1 + 0.2, 0.3),
        ("a", "a"),
        (None, None),
        (True, True),
        ([1, [2, {"a": 3}]], [1, [2, {"a": 3.0}]]),
        ({"x": [1, 2], "y": None}, {"y": None, "x": [1, 2]}),
        ([], []),
        (10**40, 10**40),
    ],
)
def test_equal_values(actual: object, expected: object) -> None:
    assert compare_values(actual, expected, 1e-6) is None


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        (True, 1),
        (1, True),
        (False, 0),
        (0, False),
        (True, 1.0),
        (None, 0),
        ("1", 1),
        (1, "1"),
        ([1, 2], [1, 2, 3]),
        ([1, 2], {"0": 1, "1": 2}),
        ({"a": 1}, {"a": 1, "b": 2}),
        (1.1, 1.0),
        (10**400, 1.0),
        (1.0, 10**400),
        (math.nan, math.nan),
        (math.inf, math.inf),
        (-math.inf, -math.inf),
        (math.nan, 1.0),
        ((1, 2), [1, 2]),
        ({1, 2}, [1, 2]),
        (b"a", "a"),
    ],
)
def test_unequal_values(actual: object, expected: object) -> None:
    assert compare_values(actual, expected, 1e-6) is not None


def test_tolerance_is_the_suites() -> None:
    assert compare_values(1.05, 1.0, 0.1) is None
    assert compare_values(1.05, 1.0, 0.01) is not None
    assert compare_values(1, 1.0000000001, 0.0) is not None
    assert compare_values(3, 3, 0.0) is None


def test_custom_objects_never_match() -> None:
    class AlwaysEqual:
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = object.__hash__

    class MyInt(int):
        pass

    assert compare_values(AlwaysEqual(), 1) is not None
    assert compare_values(1, AlwaysEqual()) is not None
    assert compare_values(MyInt(1), 1) is not None
    assert compare_values([MyInt(1)], [1]) is not None


def test_reason_never_contains_the_expected_value() -> None:
    hidden = "hidden-expected-XYZ"
    reason = compare_values(["a", "b"], ["a", hidden])
    assert reason is not None
    assert hidden not in reason
    assert "[1]" in reason
    reason = compare_values(123456, 654321)
    assert reason is not None
    assert "654321" not in reason


def test_deep_nesting_is_bounded() -> None:
    deep: object = 1
    for _ in range(500):
        deep = [deep]
    assert compare_values(deep, deep) is not None  # refused, not a RecursionError


def test_stdout_trailing_whitespace_ignored() -> None:
    assert compare_stdout("1 2 \n3\t\n\n\n", "1 2\n3") is None
    assert compare_stdout("a\r\nb\r\n", "a\nb\n") is None
    assert normalize_stdout("x  \n\n") == "x"


def test_stdout_differences() -> None:
    assert compare_stdout("1 2\n", "1  2\n") is not None  # inner whitespace matters
    assert compare_stdout(" 1\n", "1\n") is not None  # leading whitespace matters
    assert compare_stdout("1\n2\n", "1\n") is not None
    assert compare_stdout("", "0") is not None
    assert compare_stdout("", "") is None
