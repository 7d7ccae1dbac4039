"""Fuzzing the codec: whatever the bytes, ``decode`` raises only DecodeError, and what it accepts encodes.

A hand-written list of bad inputs missed deep nesting (it crash-looped two roles), so the inputs here are
generated: arbitrary bytes, JSON-shaped text with the known troublemakers (deep nesting, huge numbers,
NaN tokens, surrogate escapes, BOMs, NUL bytes, duplicate keys) and mutations of valid events of every
model. Example counts: the ``ci`` profile (default) keeps them bounded; ``HYPOTHESIS_PROFILE=fuzz`` runs
many more (see tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.codec import MAX_NESTING, Contract, DecodeError, EncodeError, decode, encode
from schemas.episodes import ActionEvent
from schemas.jsonschema import models
from tests.unit.schemas.test_roundtrip import STRATEGIES

MODELS = list(models())
SLOW_OK = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], deadline=None)


def decode_only_decode_error(data: bytes, model: type[Contract]) -> Contract | None:
    """Decode; a DecodeError is a fine answer (None), anything else fails the test. Accepted values encode."""
    try:
        value = decode(data, model)
    except DecodeError as exc:
        assert str(exc).startswith(f"invalid {model.__name__}: ")  # noqa: PT017 - any bytes, one error type
        return None
    # What a consumer accepted, it can put on the wire again (or it is too big: a clear error).
    with contextlib.suppress(EncodeError):
        encode(value)
    return value


TROUBLE = [
    b"[" * 10_000,
    b'{"a":' * 10_000,
    b"[" * (MAX_NESTING + 5) + b"]" * (MAX_NESTING + 5),
    b"9" * 5000,
    b"-" + b"9" * 400,
    b"1e999",
    b'"\\ud800"',
    b'"\\udfff\\ud800"',
    b"\xef\xbb\xbf{}",
    b"\x00",
    b'{"a": "\x00"}',
    b'{"a": 1, "a": 2}',
    b"NaN",
    b"[Infinity, -Infinity]",
    b'{"schema_version": "1.' + b"9" * 50 + b'"}',
    b'{"schema_version": "1.9", "x": [' + b"[" * 300 + b"]" * 300 + b"]}",
    b"",
    b" " * 1000,
]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("data", TROUBLE, ids=range(len(TROUBLE)))
def test_known_troublemakers(model: type[Contract], data: bytes) -> None:
    decode_only_decode_error(data, model)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_deep_nesting_names_the_problem(model: type[Contract]) -> None:
    with pytest.raises(DecodeError, match=f"nested deeper than {MAX_NESTING} levels"):
        decode(b"[" * 10_000, model)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@SLOW_OK
@given(data=st.binary(max_size=2048))
def test_arbitrary_bytes(model: type[Contract], data: bytes) -> None:
    decode_only_decode_error(data, model)


def _nest(depth: int, leaf: str) -> str:
    return "[" * depth + leaf + "]" * depth


json_tokens = st.one_of(
    st.sampled_from(["null", "true", "false", "NaN", "Infinity", "-Infinity", "1e999", "-0", "0.0", '""']),
    st.integers().map(str),
    st.integers(min_value=10**18, max_value=10**60).map(str),
    st.text(max_size=8).map(json.dumps),
    st.sampled_from(['"\\ud800"', '"\\udc00"', '"\\u0000"', '"a\\x"', '"\x00"', '"\\ud83d\\ude00"']),
    st.integers(min_value=MAX_NESTING - 2, max_value=MAX_NESTING + 50).map(lambda d: _nest(d, "1")),
)


def _object(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in pairs) + "}"


def _containers(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    arrays = st.lists(inner, max_size=5).map(lambda xs: "[" + ",".join(xs) + "]")
    keys = st.sampled_from(["a", "code", "turn", "schema_version", "content", "size", "a"])  # "a" twice: duplicates
    return arrays | st.lists(st.tuples(keys, inner), max_size=5).map(_object)


json_texts = st.recursive(json_tokens, _containers, max_leaves=20)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@SLOW_OK
@given(text=json_texts, bom=st.booleans())
def test_json_shaped_text(model: type[Contract], text: str, bom: bool) -> None:
    data = text.encode("utf-8", "surrogatepass")
    decode_only_decode_error(b"\xef\xbb\xbf" + data if bom else data, model)


def _mutate(wire: bytes, kind: str, where: int, blob: bytes) -> bytes:
    """One edit of a valid message: flip, insert, delete, truncate, or splice a troublemaker at a value."""
    at = where % (len(wire) + 1)
    if kind == "flip" and wire:
        at %= len(wire)
        return wire[:at] + bytes([wire[at] ^ 0x5A]) + wire[at + 1 :]
    if kind == "insert":
        return wire[:at] + blob + wire[at:]
    if kind == "delete":
        return wire[:at] + wire[at + len(blob) :]
    if kind == "truncate":
        return wire[:at]
    if kind == "splice":  # replace the value after the n-th colon with a troublemaker
        colons = [i for i, b in enumerate(wire) if b == ord(":")]
        if colons:
            start = colons[where % len(colons)] + 1
            end = start
            while end < len(wire) and wire[end] not in b",}":
                end += 1
            return wire[:start] + blob + wire[end:]
    return wire + blob


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@SLOW_OK
@given(
    data=st.data(),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["flip", "insert", "delete", "truncate", "splice"]),
            st.integers(min_value=0, max_value=10**6),
            st.sampled_from(TROUBLE[:12]) | json_texts.map(lambda t: t.encode("utf-8", "surrogatepass")),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_mutated_valid_events(model: type[Contract], data: st.DataObject, edits: list[tuple[str, int, bytes]]) -> None:
    wire = encode(data.draw(STRATEGIES[model]))
    for kind, where, blob in edits:
        wire = _mutate(wire, kind, where, blob)
    decode_only_decode_error(wire, model)


OUR_REF = '"s3://bkt/sha256/ab/' + "ab" * 32 + '"'
CLAIM_VALUES = [OUR_REF, '"s3://bkt/x y"', '"s3://B/x"', '"' + "ab" * 32 + '"', "-1", "0", "9223372036854775808", "1.5"]
claim_values = json_tokens | st.sampled_from([*CLAIM_VALUES, '"1"', "true"])


@SLOW_OK
@given(
    fields=st.lists(st.tuples(st.sampled_from(["ref", "sha256", "size", "extra", "ref"]), claim_values), max_size=5),
    inline=st.sampled_from(["", ',"text":"x"', ',"base64":"eA=="', ',"content":null']),
    whole=st.none() | json_texts,
)
def test_a_claim_checked_write_decodes_or_names_its_problem(
    fields: list[tuple[str, str]], inline: str, whole: str | None
) -> None:
    """A write's ``content`` (the claim check) of any shape: only DecodeError, and what decodes round-trips."""
    content = whole if whole is not None else _object(fields)
    body = '{"action":"write","path":"a"' + inline + ',"content":' + content + "}"
    data = ('{"episode_id":"e","turn":1,"action":' + body + "}").encode("utf-8", "surrogatepass")
    value = decode_only_decode_error(data, ActionEvent)
    if value is not None:
        assert decode(encode(value), ActionEvent) == value
