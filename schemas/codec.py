"""The wire codec: every contract model, its JSON encoding, and validation errors that name the field.

Why one module: producers and consumers in every component must agree byte for byte, and a message that
fails to decode must say exactly which field is wrong so it can go to the DLQ with a useful reason.

Versioning rule: a message carries a ``major.minor`` version. A reader rejects an unknown major version; it
ignores unknown fields only when the message declares a newer minor version than the reader knows (those
fields were added compatibly); an unknown field in a message of a known version is an error (a typo or a
producer bug, never silently dropped).
"""

from __future__ import annotations

import copy
import functools
import math
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, TypeVar

import orjson
import pydantic
import pydantic_core
from pydantic import AfterValidator, BaseModel, ConfigDict, JsonValue, StringConstraints
from pydantic_core import CoreSchema, PydanticCustomError, SchemaSerializer

from schemas.errors import ValidationError

#: Default cap for one encoded message; Kafka's default ``message.max.bytes`` is about 1 MB.
MAX_MESSAGE_BYTES = 1_000_000
#: Arrays and objects nest at most this deep: pydantic-core's parser limit (a stack-safe one, unlike stdlib json).
MAX_NESTING = 200

_SEMVER = re.compile(r"^(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})$")


class DecodeError(ValidationError):
    """Bytes could not be turned into a valid model; ``problems`` lists ``(field path, problem)`` pairs."""

    def __init__(self, model: str, problems: Sequence[tuple[str, str]]) -> None:
        self.model = model
        self.problems: tuple[tuple[str, str], ...] = tuple(problems)
        super().__init__(f"invalid {model}: " + "; ".join(_join(p, m) for p, m in self.problems))


class EncodeError(ValidationError):
    """A model could not be put on the wire (e.g. the encoded message is over the size cap)."""


def _join(path: str, problem: str) -> str:
    return f"{path}: {problem}" if path else problem


def _finite_json(value: JsonValue) -> JsonValue:
    """Reject NaN/Infinity anywhere inside a JSON value: they are not JSON and never compare equal."""
    where = _find_non_finite(value, "")
    if where is not None:
        raise PydanticCustomError("finite_number", "NaN/Infinity is not allowed (at {where})", {"where": where})
    return value


def _find_non_finite(value: object, path: str) -> str | None:
    """Path of the first NaN/Infinity inside ``value`` (iterative: nesting depth costs no Python stack)."""
    stack: list[tuple[object, str]] = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, float):
            if not math.isfinite(node):
                return where or "value"
        elif isinstance(node, list):
            stack.extend((item, f"{where}[{i}]") for i, item in reversed(list(enumerate(node))))
        elif isinstance(node, dict):
            items = list(node.items())
            stack.extend((item, f"{where}.{key}" if where else str(key)) for key, item in reversed(items))
    return None


@functools.lru_cache(maxsize=256)
def _parse_semver(raw: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a version string (cached: a handful of versions are on the wire, and a reward's
    validity check reads its own on every reward)."""
    match = _SEMVER.match(raw)
    return (int(match.group(1)), int(match.group(2))) if match else None


#: A ``1.x`` version string; checked in Rust (fast path), explained by ``Contract.check_version`` on error.
SchemaVersion1 = Annotated[str, StringConstraints(pattern=r"^1\.(0|[1-9][0-9]{0,5})$")]

#: Any plain JSON value (null, bool, int, float, str, list, object) with NaN/Infinity rejected.
Json = Annotated[JsonValue, AfterValidator(_finite_json)]
#: ``s3://bucket/key``: what a claim check (code, artifacts, snapshots, task archives) points at.
S3Url = Annotated[str, StringConstraints(pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^\s]{1,1024}$")]
#: A sha256 digest, lowercase hex.
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
#: A docker image id (the sha256 of its config): what a container ran, whatever its tag names later.
ImageId = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]


class Contract(BaseModel):
    """Base of every wire model: strict types, immutable, no unknown fields, no NaN/Infinity.

    Strict because a producer bug (``"3"`` for ``3``, ``1`` for ``true``) must be caught, not coerced.
    """

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        serialize_by_alias=True,
        validate_by_alias=True,
        validate_by_name=False,
        use_enum_values=False,
    )

    #: Name of the field that carries the version on the wire.
    version_field: ClassVar[str] = "schema_version"
    #: The (major, minor) version this code writes and fully understands.
    version: ClassVar[tuple[int, int]] = (1, 0)
    #: Per-model cap on one encoded message.
    max_bytes: ClassVar[int] = MAX_MESSAGE_BYTES

    @classmethod
    def parse_version(cls, raw: object) -> tuple[int, int] | None:
        """``(major, minor)`` from the version field's wire value, or None if it is malformed."""
        return _parse_semver(raw) if isinstance(raw, str) else None

    @classmethod
    def check_version(cls, raw: str) -> str:
        """Validator body for the version field: well formed and of a major version this reader knows."""
        parsed = cls.parse_version(raw)
        if parsed is None:
            raise PydanticCustomError(
                "schema_version",
                "malformed version '{raw}' (expected '{example}')",
                {"raw": raw, "example": cls.version_string()},
            )
        if parsed[0] != cls.version[0]:
            raise PydanticCustomError(
                "schema_version",
                "unsupported major version {major} (this reader understands {known}.x)",
                {"major": parsed[0], "known": cls.version[0]},
            )
        return raw

    def wire_serializer(self) -> SchemaSerializer:
        """What ``encode`` serialises this message with: the model's own serializer, unless a model has a
        cheaper one that writes the same bytes for this message (``RewardEvent``)."""
        return self.__pydantic_serializer__

    @classmethod
    def version_string(cls) -> str:
        """The version value this code writes."""
        return f"{cls.version[0]}.{cls.version[1]}"


M = TypeVar("M", bound=Contract)


def encode(model: Contract) -> bytes:
    """Serialize ``model`` to compact UTF-8 JSON; raise EncodeError if over the model's size cap."""
    data = model.wire_serializer().to_json(model, by_alias=True)
    if len(data) > model.max_bytes:
        raise EncodeError(
            f"{type(model).__name__} is {len(data)} bytes, over the {model.max_bytes}-byte cap "
            "(put large payloads in S3 and send a *_ref URL)"
        )
    return data


@functools.cache
def without_wrap(model: type[BaseModel]) -> SchemaSerializer:
    """A serializer of ``model`` that ignores its ``model_serializer``: the fields' own serialization, exclusions
    (``exclude_if``) included (what a wrap serializer's ``handler`` returns). Each class its own (a later minor's
    subclass keeps its new fields), made once."""
    plain: CoreSchema = copy.deepcopy(model.__pydantic_core_schema__)
    node: Any = plain
    while node["type"] != "model":  # the after-validators and definitions wrapped around the model's schema
        node = node["schema"]
    node.pop("serialization", None)
    return SchemaSerializer(plain)


def decode(data: bytes, model: type[M], *, max_bytes: int | None = None) -> M:
    """Parse and validate ``data`` as ``model``; raise DecodeError naming each bad field and its problem.

    Whatever the bytes, the only exception is DecodeError: a consumer dead-letters it and goes on.
    """
    return decode_verbatim(data, model, max_bytes=max_bytes)[0]


def decode_verbatim(data: bytes, model: type[M], *, max_bytes: int | None = None) -> tuple[M, bool]:
    """``decode``, and whether ``data`` validated as it is (not forgiven a newer minor's fields): then ``data``
    is a faithful encoding of the model, which a store may keep instead of serialising the model again."""
    cap = model.max_bytes if max_bytes is None else max_bytes
    if len(data) > cap:
        raise DecodeError(model.__name__, [("", f"message is {len(data)} bytes, over the {cap}-byte cap")])
    try:  # the model's validator itself: ``model_validate_json`` only adds a Python call and its checks
        return model.__pydantic_validator__.validate_json(data), True
    except pydantic.ValidationError as exc:
        try:
            return _decode_slow(data, model, exc), False
        except DecodeError:
            raise
        except Exception as bug:  # a bug in the error path must not take the consumer down with it
            raise DecodeError(model.__name__, [("", f"invalid ({type(bug).__name__} while explaining why)")]) from bug


def _decode_slow(data: bytes, model: type[M], exc: pydantic.ValidationError) -> M:
    """The error path: find out precisely what is wrong (or forgive fields from a newer minor version).

    Every parse here is pydantic-core's own (jiter, as in the fast path): no Python recursion, the same
    nesting limit, exact big integers. orjson only words the "not JSON" message.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DecodeError(model.__name__, [("", f"not UTF-8 (byte {err.start})")]) from None
    too_deep = _nesting_error(exc)
    if too_deep is not None:
        raise DecodeError(model.__name__, [("", too_deep)])
    try:
        obj = pydantic_core.from_json(data, allow_inf_nan=False)
    except ValueError as err:
        _raise_non_finite(data, model)
        raise DecodeError(model.__name__, [("", f"not JSON: {_json_problem(text, err)}")]) from None
    return _retry_newer_minor(obj, model, exc)


def _nesting_error(exc: pydantic.ValidationError) -> str | None:
    """The problem text when the parser gave up on nesting depth (arrays and objects inside each other)."""
    for error in exc.errors(include_url=False, include_input=False):
        reason = str(error.get("ctx", {}).get("error", ""))
        if error["type"] == "json_invalid" and "recursion limit" in reason:
            where = reason.rpartition(" at ")[2] if " at " in reason else "?"
            return f"nested deeper than {MAX_NESTING} levels of arrays and objects (at {where})"
    return None


def _json_problem(text: str, err: ValueError) -> str:
    """orjson's wording of why ``text`` is not JSON (it names line, column and char), else the parser's."""
    if text.startswith("\ufeff"):
        return "starts with a byte order mark (BOM); JSON on the wire is plain UTF-8"
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError as worded:
        return str(worded)
    return str(err)


def _raise_non_finite(data: bytes, model: type[Contract]) -> None:
    """If NaN/Infinity tokens are what makes ``data`` invalid JSON, raise an error naming where they are."""
    try:
        lenient = pydantic_core.from_json(data, allow_inf_nan=True)
    except ValueError:
        return
    where = _find_non_finite(lenient, "")
    problem = "NaN/Infinity is not allowed"
    raise DecodeError(
        model.__name__, [(where, problem)] if where and where != "value" else [("", f"not JSON: {problem}")]
    )


def _retry_newer_minor(obj: object, model: type[M], exc: pydantic.ValidationError) -> M:
    """Drop unknown fields if the message is a newer minor version, else report every problem."""
    errors = exc.errors(include_url=False, include_context=True, include_input=False)
    if isinstance(obj, dict):
        version = model.parse_version(obj.get(model.version_field))
        if version is not None and version[0] != model.version[0]:
            # A different major version may have any shape: report only that.
            errors = [e for e in errors if e["loc"][:1] == (model.version_field,)] or errors
        elif version is not None and version[1] > model.version[1]:
            extras = [e["loc"] for e in errors if e["type"] == "extra_forbidden"]
            if extras and len(extras) == len(errors):
                pruned = _prune(obj, [tuple(loc) for loc in extras])
                try:
                    return model.model_validate_json(pydantic_core.to_json(pruned))
                except pydantic.ValidationError as again:
                    errors = again.errors(include_url=False, include_context=True, include_input=False)
            errors = [e for e in errors if e["type"] != "extra_forbidden"] or errors
    raise DecodeError(model.__name__, [_describe(e, obj, model) for e in errors]) from None


def _describe(error: Any, obj: object, model: type[Contract]) -> tuple[str, str]:
    """(field path, problem) for one pydantic error; discriminator errors point at the tag field."""
    path = format_path(error["loc"], obj)
    kind = error["type"]
    if kind == "string_pattern_mismatch" and path == model.version_field and isinstance(obj, dict):
        try:
            model.check_version(obj[path])
        except PydanticCustomError as why:
            return path, why.message()
    if kind in ("union_tag_not_found", "union_tag_invalid"):
        ctx = error.get("ctx", {})
        tag_field = str(ctx.get("discriminator", "kind")).strip("'")
        path = f"{path}.{tag_field}" if path else tag_field
        if kind == "union_tag_not_found":
            return path, _MESSAGES["missing"]
        return path, f"must be one of {ctx.get('expected_tags', '?')} (got {ctx.get('tag', '?')!r})"
    field = error.get("ctx", {}).get("field")
    if isinstance(field, str):  # a model-level check that is about one field (its loc ends at the model)
        base = format_path(error["loc"], obj, name_missing=False)
        path = f"{base}.{field}" if base else field
    return path, _problem(error)


def _prune(obj: Any, locs: Sequence[tuple[int | str, ...]]) -> Any:
    """Deep copy of ``obj`` without the entries at ``locs`` (walking only real keys, skipping union tags)."""
    pruned = pydantic_core.from_json(pydantic_core.to_json(obj))  # exact ints, unlike a float round trip
    for loc in locs:
        steps = _real_steps(loc, pruned)
        parent: Any = pruned
        for step in steps[:-1]:
            parent = parent[step]
        if steps and isinstance(parent, dict):
            parent.pop(steps[-1], None)
    return pruned


def _real_steps(loc: Sequence[int | str], obj: object, *, name_missing: bool = True) -> list[int | str]:
    """The loc elements that index into ``obj``; pydantic inserts union tags that are not real keys.

    ``name_missing``: a last element that is not in ``obj`` is a missing field, and named; off for an error
    of a model-level check, whose loc ends at the model (or at a union tag inside it)."""
    steps: list[int | str] = []
    current: object = obj
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        in_dict = isinstance(current, Mapping) and isinstance(part, str) and part in current
        in_list = isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current)
        if in_dict or in_list:
            current = current[part]  # type: ignore[index]
            steps.append(part)
        elif last and name_missing and isinstance(current, Mapping):
            steps.append(part)  # a missing field: name it
    return steps


def problems_of(exc: pydantic.ValidationError, obj: object = None) -> list[tuple[str, str]]:
    """``(field path, problem)`` of every error, worded as ``decode`` words them: the one formatter of
    validation errors (settings, policies, SDK arguments, CLI input). ``obj``: the input, to resolve paths."""
    out = []
    for error in exc.errors(include_url=False, include_input=False):
        loc = error["loc"]
        path = format_path(loc, obj) if obj is not None else ".".join(str(part) for part in loc)
        out.append((path, _problem(error)))
    return out


def one_line(problems: Sequence[tuple[str, str]], root: str = "") -> str:
    """Problems as one line: ``path: problem; ...`` (``root`` names an error about the whole input)."""
    return "; ".join(_join(path or root, problem) for path, problem in problems)


def format_path(loc: Sequence[int | str], obj: object, *, name_missing: bool = True) -> str:
    """Turn a pydantic loc into ``hidden_tests.cases[0].args`` form, resolved against the input."""
    out = ""
    for step in _real_steps(loc, obj, name_missing=name_missing):
        if isinstance(step, int):
            out += f"[{step}]"
        else:
            out += f".{step}" if out else step
    return out


_MESSAGES = {
    "missing": "required field is missing",
    "extra_forbidden": "unknown field",
    "finite_number": "NaN/Infinity is not allowed",
}


def _problem(error: Any) -> str:
    """One short phrase for a pydantic error, with wording tuned for the common cases."""
    kind = error["type"]
    if kind in _MESSAGES and kind != "finite_number":
        return _MESSAGES[kind]
    if kind == "finite_number" and "where" not in error.get("ctx", {}):
        return _MESSAGES[kind]
    msg: str = error["msg"]
    return msg[0].lower() + msg[1:] if msg[:1].isupper() and msg[1:2].islower() else msg
