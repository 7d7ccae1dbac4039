"""Typed values across the harness's trust boundary: what a candidate child may send back, and how.

Why: a candidate child returns each value in a tagged JSON encoding built from exact builtin types only (no
subclasses, no custom classes, size/depth capped, no NaN/inf); the parent treats every reply as hostile and
re-checks it (``reply_value``) into typed JSON for the grader, or fresh builtin values for check code. Plain
JSON where possible; one-key objects (``TAGS``) for tuple/dict/set/frozenset/non-finite float.

Guest code (standard library only), spliced into the grading harness (``harness``).
"""

from __future__ import annotations

import collections
import json
import math

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any, NoReturn

MAX_DEPTH = 100
MAX_NODES = 200_000
MAX_INT_BITS = 4096
MAX_VALUE_BYTES = 256 * 1024
TAGS = ("$t", "$d", "$s", "$f", "$x")

# Bound before any candidate code runs (see ``child_pipes``).
_loads = json.loads
#: stdlib dict subclasses accepted as dicts; read with ``dict.items`` so overridden methods never run.
_DICT_TYPES = (dict, collections.OrderedDict, collections.defaultdict, collections.Counter)


class HarnessError(Exception):
    """Something the candidate (or a malformed job) did that ends the current case."""


class NonPlainError(HarnessError):
    """A value that is not a plain builtin value (custom class, subclass, NaN, too big, cyclic)."""


def encode_value(value: object, *, allow_non_finite: bool = False) -> object:
    """Tagged JSON-ready form of ``value``, using exact builtin types only. Raises ``NonPlainError``."""
    budget = [MAX_NODES]
    return _enc(value, 0, budget, allow_non_finite)


def _enc(v: object, depth: int, budget: list[int], nonfinite: bool) -> object:  # noqa: C901, PLR0911, PLR0912
    """One node of ``encode_value``: exact ``type(v) is`` checks, never ``isinstance`` or ``==``."""
    _charge(depth, budget)
    t = type(v)
    if v is None or t is bool:
        return v
    if t is int and isinstance(v, int):
        if v.bit_length() > MAX_INT_BITS:
            raise NonPlainError("integer too large")
        return v
    if t is float and isinstance(v, float):
        if math.isfinite(v):
            return v
        if not nonfinite:
            raise NonPlainError("non-finite float (NaN/inf) is never a valid result")
        return {"$x": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if t is str and isinstance(v, str):
        budget[0] -= len(v) // 16
        if len(v) > MAX_VALUE_BYTES:
            raise NonPlainError("string too large")
        return v
    if (t is list or t is tuple or t is set or t is frozenset) and isinstance(v, list | tuple | set | frozenset):
        seq = v
        if len(seq) > MAX_NODES:
            raise NonPlainError("value too large (too many elements)")
        items = [_enc(x, depth + 1, budget, nonfinite) for x in seq]
        if t is list:
            return items
        return {"$t" if t is tuple else ("$s" if t is set else "$f"): items}
    if t in _DICT_TYPES and isinstance(v, dict):
        mapping = v
        if dict.__len__(mapping) > MAX_NODES:
            raise NonPlainError("value too large (too many elements)")
        return {
            "$d": [
                [_enc(k, depth + 1, budget, nonfinite), _enc(x, depth + 1, budget, nonfinite)]
                for k, x in dict.items(mapping)
            ]
        }
    raise NonPlainError(f"not a plain value: {type_name(v)}")


def _charge(depth: int, budget: list[int]) -> None:
    """One node more of a value being checked: ``NonPlainError`` once the value is too large or too deep."""
    budget[0] -= 1
    if budget[0] < 0:
        raise NonPlainError("value too large (too many elements)")
    if depth > MAX_DEPTH:
        raise NonPlainError("value nested too deeply (or self-referencing)")


def type_name(v: object) -> str:
    """A type name that cannot run candidate code (no metaclass properties, no ``__repr__``)."""
    try:
        name = type.__dict__["__name__"].__get__(type(v))
        return name if type(name) is str else "?"
    except Exception:
        return "?"


def decode_value(obj: object) -> object:
    """Python value from the tagged form the parent sends a child (call arguments; non-finite floats allowed)."""
    t = type(obj)
    if obj is None or t is bool or t is int or t is float or t is str:
        return obj
    if isinstance(obj, list) and t is list:
        return [decode_value(x) for x in obj]
    if not (isinstance(obj, dict) and t is dict and len(obj) == 1):
        raise NonPlainError("malformed tagged value")
    ((tag, body),) = obj.items()
    if tag == "$x":
        if body not in ("nan", "inf", "-inf"):
            raise NonPlainError("non-finite float")
        return float(body)
    if not (isinstance(body, list) and type(body) is list):
        raise NonPlainError("malformed tagged value")
    if tag == "$t":
        return tuple(decode_value(x) for x in body)
    if tag in ("$s", "$f"):
        members = [decode_value(x) for x in body]
        try:
            return set(members) if tag == "$s" else frozenset(members)
        except TypeError as exc:
            raise NonPlainError("unhashable set member") from exc
    if tag == "$d":
        return _decode_pairs(body)
    raise NonPlainError("unknown tag")


def _decode_pairs(body: list[Any]) -> dict[Any, Any]:
    """A ``$d`` body: a list of [key, value] pairs."""
    out: dict[Any, Any] = {}
    for pair in body:
        if type(pair) is not list or len(pair) != 2:
            raise NonPlainError("malformed dict")
        try:
            out[decode_value(pair[0])] = decode_value(pair[1])
        except TypeError as exc:
            raise NonPlainError("unhashable dict key") from exc
    return out


def reply_value(obj: object, *, rich: bool) -> object:
    """A value a candidate process sent back, checked as if it were hostile (it may be: the candidate can
    write anything on its reply pipe): typed JSON for the grader (``rich=False``), or Python values for
    check code (``rich=True``). Raises ``NonPlainError`` for anything the grader must not see or cannot
    write: non-finite floats (``1e999``), huge ints, deep or wide values, lone surrogates, bad tags.

    Typed JSON is plain JSON plus ``$t``/``$s``/``$f`` for tuples and sets and ``$d`` for dicts whose keys
    are not all strings (see ``workers.grading.compare``): the form expected values are stored in.
    """
    return _reply(obj, 0, [MAX_NODES], rich)


def _reply(v: object, depth: int, budget: list[int], rich: bool) -> object:  # noqa: C901, PLR0911, PLR0912
    """One node of ``reply_value``."""
    _charge(depth, budget)
    t = type(v)
    if v is None or t is bool:
        return v
    if t is int:
        if v.bit_length() > MAX_INT_BITS:  # type: ignore[attr-defined]
            raise NonPlainError("integer too large")
        return v
    if t is float:
        if not math.isfinite(v):  # type: ignore[arg-type]
            raise NonPlainError("non-finite float (NaN/inf) is never a valid result")
        return v
    if t is str:
        text: str = v  # type: ignore[assignment]
        if len(text) > MAX_VALUE_BYTES:
            raise NonPlainError("string too large")
        if not is_clean_text(text):
            raise NonPlainError("string is not valid Unicode (it holds a lone surrogate)")
        budget[0] -= len(text) // 16
        return text
    if t is list:
        return [_reply(x, depth + 1, budget, rich) for x in v]  # type: ignore[attr-defined]
    if t is dict and len(v) == 1:  # type: ignore[arg-type]
        ((tag, body),) = v.items()  # type: ignore[attr-defined]
        if type(body) is list:
            if tag == "$d":
                return _reply_dict(body, depth, budget, rich)
            if tag in ("$t", "$s", "$f"):
                items = [_reply(x, depth + 1, budget, rich) for x in body]
                if tag == "$t":
                    return tuple(items) if rich else {tag: items}
                if not rich:
                    _distinct_keys(body, depth, "set member")
                    return {tag: items}
                try:
                    return set(items) if tag == "$s" else frozenset(items)
                except TypeError as exc:
                    raise NonPlainError("unhashable set member") from exc
    raise NonPlainError("malformed reply value")


def _distinct_keys(raw: list[Any], depth: int, what: str) -> None:
    """Set members (or dict keys) as a real set (or dict) holds them: hashable and distinct. Typed JSON
    cannot tell, so the rich values are built once more, for this check only."""
    keys = [_reply(x, depth + 1, [MAX_NODES], True) for x in raw]
    try:
        distinct = len(set(keys)) == len(keys)
    except TypeError as exc:
        raise NonPlainError(f"unhashable {what}") from exc
    if not distinct:
        raise NonPlainError(f"a {what} is there twice")


def _reply_dict(body: list[Any], depth: int, budget: list[int], rich: bool) -> object:
    """A ``$d`` body of ``reply_value``: a JSON object when every key is a string (and none looks like a tag),
    else ``$d`` pairs; a dict for check code."""
    pairs: list[tuple[Any, Any]] = []
    for pair in body:
        if type(pair) is not list or len(pair) != 2:
            raise NonPlainError("malformed dict")
        pairs.append((_reply(pair[0], depth + 1, budget, rich), _reply(pair[1], depth + 1, budget, rich)))
    if rich:
        out: dict[Any, Any] = {}
        for key, item in pairs:
            try:
                out[key] = item
            except TypeError as exc:
                raise NonPlainError("unhashable dict key") from exc
        return out
    keys = [k for k, _ in pairs]
    if all(type(k) is str for k in keys):
        if len(set(keys)) != len(keys):
            raise NonPlainError("a dict key is there twice")
        if not (len(keys) == 1 and keys[0] in TAGS):
            return dict(pairs)
    else:
        _distinct_keys([pair[0] for pair in body], depth, "dict key")
    return {"$d": [[k, item] for k, item in pairs]}


def is_clean_text(text: str) -> bool:
    """True when ``text`` encodes as UTF-8 (no lone surrogate): only such text can leave the sandbox."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def tag_plain(obj: object) -> object:
    """Tagged form of a plain JSON value from the job (objects become ``$d``)."""
    if isinstance(obj, list):
        return [tag_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {"$d": [[k, tag_plain(v)] for k, v in obj.items()]}
    return obj


def _reject_constant(name: str) -> NoReturn:
    raise NonPlainError(f"non-finite number {name}")


def strict_loads(data: bytes | bytearray | str) -> object:
    """JSON without NaN/Infinity (json's default accepts them)."""
    return _loads(data, parse_constant=_reject_constant)
