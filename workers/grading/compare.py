"""Strict comparison OUTSIDE the sandbox, on typed JSON only, with the reference's own types.

Why strict: a reward must not be reachable by a value that merely claims equality, nor by one that is
only "close" in a type the reference did not use. Both sides are *typed JSON* (the grader's wire format,
also what expected values are stored as, since they are produced from a reference solution by the same
harness): plain JSON, plus one-key objects for the Python types JSON lacks:

* ``{"$t": [...]}`` a tuple, ``{"$s": [...]}`` a set, ``{"$f": [...]}`` a frozenset, ``{"$d": [[k, v], ...]}``
  a dict whose keys are not all strings (or whose only key looks like a tag). Any other object is a dict.
  ``{"$x": ...}`` (a non-finite float) is never a valid value.

Rules (each one closes a way to be rewarded for a wrong answer):

1. The expected value's type decides. ``bool`` is not a number; ``None`` is only ``None``.
2. Integers are exact, never compared through floats (``-1e16`` is not ``-9999999999999999``). An int
   expected value needs an int: a float answer to an int reference fails, even when it is integral.
3. Tolerance (the suite's ``atol``) applies only where the expected value is a float. There an int answer
   is accepted when it is within ``atol`` of it, computed exactly (no overflow, no rounding).
4. NaN and infinities are never equal to anything (they cannot even be represented, on either side).
5. A list is not a tuple and neither is a set. Sequences compare element by element, in order.
6. ``set`` and ``frozenset`` compare as Python compares them (equal when they hold the same members).
   Set members and dict keys compare exactly (no tolerance) and with the same strict types: ``1``,
   ``1.0`` and ``True`` are three different members. A set that lists a member twice is invalid.
7. Dicts need the same keys; values are compared with these rules.
8. Anything that is not typed JSON (custom classes, malformed tags, nesting deeper than ``MAX_DEPTH``)
   never matches.

A reason names the path and the kinds of the values, never the expected value itself.
"""

from __future__ import annotations

import math
from fractions import Fraction

MAX_DEPTH = 200
#: One-key objects that are typed values, not dicts.
TAGS = frozenset({"$t", "$s", "$f", "$d", "$x"})
_SEQUENCE_TAGS = {"$t": "tuple", "$s": "set", "$f": "set"}


class InvalidValueError(Exception):
    """Not typed JSON (or a set/dict that is not one)."""


def compare_values(actual: object, expected: object, atol: float = 0.0) -> str | None:
    """None when ``actual`` matches ``expected``; otherwise a short reason naming the first difference.

    The reason mentions only the path and the kinds of the values, never the expected value itself, so it
    is safe to show for hidden cases too.
    """
    return _cmp(actual, expected, atol, "$", 0)


def to_typed(value: object) -> object:  # noqa: PLR0911
    """Typed JSON of a Python value made of builtin types (for literals and tests; the sandbox has its own)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$x": repr(value)}
    if isinstance(value, list):
        return [to_typed(v) for v in value]
    if isinstance(value, tuple):
        return {"$t": [to_typed(v) for v in value]}
    if isinstance(value, set | frozenset):
        return {"$s" if isinstance(value, set) else "$f": [to_typed(v) for v in value]}
    if isinstance(value, dict):
        if all(type(k) is str for k in value) and not (len(value) == 1 and next(iter(value)) in TAGS):
            return {k: to_typed(v) for k, v in value.items()}
        return {"$d": [[to_typed(k), to_typed(v)] for k, v in value.items()]}
    raise InvalidValueError(f"not a plain value: {type(value).__name__}")


def _kind(value: object) -> str:  # noqa: PLR0911
    """The typed-JSON kind of ``value``: null, bool, int, float, string, list, tuple, set, dict, invalid."""
    t = type(value)
    if value is None:
        return "null"
    if t is bool:
        return "bool"
    if t is int:
        return "int"
    if t is float:
        return "float" if math.isfinite(value) else "invalid"  # type: ignore[arg-type]
    if t is str:
        return "string"
    if t is list:
        return "list"
    if t is dict:
        tag = _tag(value)  # type: ignore[arg-type]
        if tag is None:
            return "dict"
        if tag in _SEQUENCE_TAGS and type(value[tag]) is list:  # type: ignore[index]
            return _SEQUENCE_TAGS[tag]
        if tag == "$d" and type(value[tag]) is list:  # type: ignore[index]
            return "dict"
    return "invalid"


def _tag(value: dict[object, object]) -> str | None:
    if len(value) != 1:
        return None
    (key,) = value
    return key if key in TAGS else None


def _cmp(actual: object, expected: object, atol: float, path: str, depth: int) -> str | None:  # noqa: PLR0911
    if depth > MAX_DEPTH:
        return f"{path}: nested too deeply"
    ka, ke = _kind(actual), _kind(expected)
    if "invalid" in (ka, ke):
        return f"{path}: not a valid value"
    if ke == "float" and ka in ("int", "float"):
        return None if _close(actual, expected, atol) else f"{path}: wrong number"  # type: ignore[arg-type]
    if ka != ke:
        return f"{path}: expected {ke}, got {ka}"
    if ka in ("list", "tuple"):
        return _cmp_sequence(_items(actual), _items(expected), atol, path, depth)
    try:
        if ka == "set":
            return None if _members(actual, depth) == _members(expected, depth) else f"{path}: different members"
        if ka == "dict":
            return _cmp_dict(_entries(actual, depth), _entries(expected, depth), atol, path, depth)
    except InvalidValueError as exc:
        return f"{path}: not a valid value ({exc})"
    return None if actual == expected else f"{path}: wrong {ka}"  # int, str, bool, null: exact


def _items(value: object) -> list[object]:
    """The elements of a list or of a ``$t`` tuple."""
    return value if type(value) is list else value["$t"]  # type: ignore[index]


def _cmp_sequence(actual: list[object], expected: list[object], atol: float, path: str, depth: int) -> str | None:
    if len(actual) != len(expected):
        return f"{path}: expected {len(expected)} elements, got {len(actual)}"
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        reason = _cmp(a, e, atol, f"{path}[{i}]", depth + 1)
        if reason is not None:
            return reason
    return None


def _cmp_dict(
    actual: dict[object, tuple[object, object]],
    expected: dict[object, tuple[object, object]],
    atol: float,
    path: str,
    depth: int,
) -> str | None:
    if actual.keys() != expected.keys():
        return f"{path}: different keys"
    for key, (shown, e) in expected.items():
        where = f"{path}.{shown}" if type(shown) is str else f"{path}[<{_kind(shown)} key>]"
        reason = _cmp(actual[key][1], e, atol, where, depth + 1)
        if reason is not None:
            return reason
    return None


def _close(actual: int | float, expected: float, atol: float) -> bool:
    """Within ``atol`` of a float reference: float arithmetic for two floats, exact for an int answer."""
    if type(actual) is float:
        return abs(actual - expected) <= atol
    return abs(Fraction(actual) - Fraction(expected)) <= atol


def _members(value: object, depth: int) -> frozenset[object]:
    """The exact keys of a set's members; InvalidValueError if one is unhashable or listed twice."""
    items: list[object] = next(iter(value.values()))  # type: ignore[attr-defined]
    keys = frozenset(_exact(m, depth + 1) for m in items)
    if len(keys) != len(items):
        raise InvalidValueError("a set member is listed twice")
    return keys


def _entries(value: object, depth: int) -> dict[object, tuple[object, object]]:
    """``{exact key: (key, value)}`` of a dict in either form; InvalidValueError for bad or repeated keys."""
    assert isinstance(value, dict)  # noqa: S101 - _kind said dict
    if _tag(value) is None:
        return {("string", k): (k, v) for k, v in value.items()}
    pairs = value["$d"]
    out: dict[object, tuple[object, object]] = {}
    for pair in pairs:
        if type(pair) is not list or len(pair) != 2:
            raise InvalidValueError("a dict entry is not a [key, value] pair")
        key = _exact(pair[0], depth + 1)
        if key in out:
            raise InvalidValueError("a dict key is listed twice")
        out[key] = (pair[0], pair[1])
    return out


def _exact(value: object, depth: int) -> object:
    """A hashable key that is equal for two typed values exactly when they are the same (strict types)."""
    if depth > MAX_DEPTH:
        raise InvalidValueError("nested too deeply")
    kind = _kind(value)
    if kind in ("null", "bool", "int", "float", "string"):
        return (kind, value)
    if kind == "tuple":
        return ("tuple", tuple(_exact(v, depth + 1) for v in _items(value)))
    if kind == "set" and next(iter(value)) == "$f":  # type: ignore[call-overload]
        return ("set", _members(value, depth))
    raise InvalidValueError(f"a {kind} cannot be a set member or dict key")


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
