"""Strict comparison outside the sandbox: the reference's types decide, ints are exact, tolerance only for
float references, tuples and sets keep their type, NaN/inf never match, reasons never leak."""

from __future__ import annotations

import math

import pytest

from workers.grading.compare import compare_stdout, compare_values, normalize_stdout, to_typed


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        (1, 1),
        (1, 1.0),
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
        (1.0, 1),  # a float answer to an int reference, even an integral one
        (-1e16, -9999999999999999),  # ints are never compared through floats
        (-9999999999999999, -1e16),  # an int answer to a float reference: exactly, within atol
        (2**60 + 1, float(2**60)),
        (10**30 + 1, 10**30),
    ],
)
def test_unequal_values(actual: object, expected: object) -> None:
    assert compare_values(actual, expected, 1e-6) is not None


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        ({"$t": [1, 2]}, [1, 2]),  # a tuple is not a list ...
        ([1, 2], {"$t": [1, 2]}),  # ... nor a list a tuple
        ({"$s": [1, 2]}, [1, 2]),
        ([1, 2], {"$s": [1, 2]}),
        ({"$s": [1, 2]}, {"$t": [1, 2]}),
        ({"$s": [1]}, {"$s": [True]}),  # set members: strict types, exact
        ({"$s": [1.0]}, {"$s": [1]}),
        ({"$s": [1.0000001]}, {"$s": [1.0]}),  # no tolerance for members
        ({"$s": [1, 1]}, {"$s": [1]}),  # a member listed twice is no set
        ({"$s": [[1]]}, {"$s": [[1]]}),  # unhashable member
        ({"$d": [[1, "a"]]}, {"$d": [[True, "a"]]}),
        ({"$d": [[1, "a"], [1, "b"]]}, {"$d": [[1, "a"]]}),  # a key listed twice
        ({"$d": [[[1], "a"]]}, {"$d": [[[1], "a"]]}),  # unhashable key
        ({"$x": "inf"}, {"$x": "inf"}),  # non-finite is never valid
        ({"$x": "nan"}, 1.0),
        ({"$t": 5}, {"$t": 5}),  # malformed tag
        ({"$d": [[1]]}, {"$d": [[1]]}),
        ({"$t": [1, 2.5]}, {"$t": [1, 2]}),
        ({"$f": [{"$t": [1, 2]}]}, {"$f": [{"$t": [2, 1]}]}),
    ],
)
def test_tagged_values_keep_their_type(actual: object, expected: object) -> None:
    assert compare_values(actual, expected, 1e-6) is not None


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        ({"$t": [1, [2.0000001]]}, {"$t": [1, [2.0]]}),  # tolerance inside a tuple, for a float leaf
        ({"$s": [3, 1, 2]}, {"$s": [1, 2, 3]}),  # sets are unordered
        ({"$s": [1]}, {"$f": [1]}),  # set and frozenset compare as Python compares them
        ({"$d": [[1, "a"], [{"$t": [2, 3]}, "b"]]}, {"$d": [[{"$t": [2, 3]}, "b"], [1, "a"]]}),
        ({"$d": [["a", 1]]}, {"a": 1}),  # a str-keyed dict in either form
        ({"$d": [["$t", 1]]}, {"$d": [["$t", 1]]}),  # a dict whose only key looks like a tag
        ({"$f": [{"$f": [1]}, {"$t": [1, "x"]}]}, {"$f": [{"$t": [1, "x"]}, {"$f": [1]}]}),
        ({"$s": [0.0]}, {"$s": [-0.0]}),
    ],
)
def test_tagged_equal_values(actual: object, expected: object) -> None:
    assert compare_values(actual, expected, 1e-6) is None


def test_to_typed_tags_what_json_lacks() -> None:
    assert to_typed((1, [2, (3,)], {"k": {4}})) == {"$t": [1, [2, {"$t": [3]}], {"k": {"$s": [4]}}]}
    assert to_typed({1: "a"}) == {"$d": [[1, "a"]]}
    assert to_typed({"$t": 1}) == {"$d": [["$t", 1]]}
    assert to_typed(frozenset()) == {"$f": []}
    assert compare_values(to_typed((1, 2)), to_typed((1, 2))) is None


def test_int_answer_to_a_float_reference_is_exact() -> None:
    assert compare_values(2**53 + 1, float(2**53), 0.5) is not None  # exactly 1 away (a float diff says 0)
    assert compare_values(2**53 + 1, float(2**53), 1.0) is None
    assert compare_values(10**400, 1e308, 1e6) is not None  # no OverflowError, just wrong
    assert compare_values(True, 1.0, 1.0) is not None  # bool is never a number


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
