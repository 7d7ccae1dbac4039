"""Strict comparison OUTSIDE the sandbox, on plain JSON only.

Why strict: a reward must not be reachable by a value that merely claims equality. Both sides are plain
JSON parsed by the grader (dict, list, str, int, float, bool, None); anything else never matches.
Rules: bool is not a number; int and float compare numerically within ``atol``; NaN/inf never equal
anything; lists compare element-wise (tuples arrive as lists on both sides, because expected values are
produced by the same serializer); dicts need the same keys.
"""

from __future__ import annotations

import math

MAX_DEPTH = 200


def compare_values(actual: object, expected: object, atol: float = 0.0) -> str | None:
    """None when ``actual`` matches ``expected``; otherwise a short reason naming the first difference.

    The reason mentions only the path and the kinds of the values, never the expected value itself, so it
    is safe to show for hidden cases too.
    """
    return _cmp(actual, expected, atol, "$", 0)


def _kind(value: object) -> str:  # noqa: PLR0911
    t = type(value)
    if value is None:
        return "null"
    if t is bool:
        return "bool"
    if t is int or t is float:
        return "number"
    if t is str:
        return "string"
    if t is list:
        return "array"
    if t is dict:
        return "object"
    return "non-plain"


def _cmp(actual: object, expected: object, atol: float, path: str, depth: int) -> str | None:  # noqa: PLR0911, C901
    if depth > MAX_DEPTH:
        return f"{path}: nested too deeply"
    ka, ke = _kind(actual), _kind(expected)
    if "non-plain" in (ka, ke):
        return f"{path}: non-plain value"
    if ka != ke:
        return f"{path}: expected {ke}, got {ka}"
    if ka == "number":
        return None if _numbers_equal(actual, expected, atol) else f"{path}: wrong number"
    if isinstance(actual, list) and isinstance(expected, list):
        if len(actual) != len(expected):
            return f"{path}: expected {len(expected)} elements, got {len(actual)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            reason = _cmp(a, e, atol, f"{path}[{i}]", depth + 1)
            if reason is not None:
                return reason
        return None
    if isinstance(actual, dict) and isinstance(expected, dict):
        if set(actual) != set(expected):
            return f"{path}: different keys"
        for key, e in expected.items():
            reason = _cmp(actual[key], e, atol, f"{path}.{key}", depth + 1)
            if reason is not None:
                return reason
        return None
    return None if actual == expected else f"{path}: wrong {ka}"  # str, bool, null: exact


def _numbers_equal(actual: object, expected: object, atol: float) -> bool:
    """Exact for two ints; otherwise finite floats within ``atol`` (NaN and inf never equal)."""
    if type(actual) is int and type(expected) is int:
        return actual == expected
    try:
        a = float(actual)  # type: ignore[arg-type]  # int or float, checked by _kind
        e = float(expected)  # type: ignore[arg-type]
    except (OverflowError, TypeError, ValueError):
        return False
    if not (math.isfinite(a) and math.isfinite(e)):
        return False
    return abs(a - e) <= atol


def normalize_stdout(text: str) -> str:
    """Trailing whitespace of each line and trailing blank lines are ignored; ``\\r\\n`` equals ``\\n``."""
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def compare_stdout(actual: str, expected: str) -> str | None:
    """None when the outputs match modulo trailing whitespace; otherwise the first differing line number."""
    got = normalize_stdout(actual).split("\n")
    want = normalize_stdout(expected).split("\n")
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return f"line {i + 1} differs"
    if len(got) != len(want):
        return f"expected {len(want)} lines, got {len(got)}"
    return None
