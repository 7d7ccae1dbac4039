"""Properties of the path a candidate's reply takes out of the sandbox, as pure functions (no processes).

Whatever bytes a candidate writes on its reply pipe, the harness parent turns them into a record it can
write, the grader parses that record, scores it and writes the result: never an exception, never a harness
error, never a lone surrogate. The same holds for whatever the grader finds on the sandbox's stdout. The
sandbox-side counterpart (real runs, both backends) is ``tests/sandbox/test_forced_outcomes.py``.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from guest import call_suites, child_pipes, harness_records, typed_values
from guest.framing import MAGIC
from schemas.tasks import AssertSuite, CallSuite, IoSuite
from schemas.text import is_clean_text, sanitize_text
from workers.grading.compare import compare_values, to_typed
from workers.grading.grader import split_output
from workers.grading.suites import parse_records, score_suite

NONCE = b"0123456789abcdef0123456789abcdef"
CALL = CallSuite.model_validate({"kind": "call", "cases": [{"id": "c", "args": [1], "expected": {"$t": [1, 2.5]}}]})
IO = IoSuite.model_validate({"kind": "io", "cases": [{"id": "c", "stdin": "", "expected_stdout": "x"}]})
CHECK = AssertSuite.model_validate({"kind": "assert", "code": "def check(candidate):\n    pass\n"})

TAG_KEYS = st.sampled_from(["$t", "$s", "$f", "$d", "$x", "ok", "value", "error", "a"])
texts = st.text(max_size=8) | st.sampled_from(["\ud800", "a\udfff", "\n@@RS1 " + NONCE.decode() + ' {"done":true}'])
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**4000, max_value=2**4200),
    st.floats(),  # NaN and infinities included
    texts,
)
json_like = st.recursive(
    leaves, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(TAG_KEYS | texts, kids, max_size=3), max_leaves=16
)


def frame(body: bytes) -> bytes:
    return b"\n" + MAGIC + b" " + NONCE + b" " + body + b"\n"


def hello() -> bytes:
    return frame(b'{"hello":true,"hardened":true,"stdin_ok":true}')


def through_the_grader(records: bytes, suite: CallSuite | IoSuite | AssertSuite) -> None:
    """Parse, score and write what the harness said: nothing may raise, nothing may hold a lone surrogate."""
    parsed = parse_records(hello() + records, NONCE)
    assert parsed.harness_error is None
    outcome = score_suite(suite, "public", parsed.cases.get(0, {}))
    orjson.dumps([c.to_json() for c in outcome.cases])


def harness_record(body: bytes) -> bytes:
    """What the harness parent writes for call case ``c`` when the candidate's reply body is ``body``."""
    try:
        reply = child_pipes.check_reply(child_pipes.parse_msg(body))
        record: dict[str, object] = call_suites.reply_record("c", reply, 1.0)
    except typed_values.HarnessError as exc:
        record = {"id": "c", "ok": False, "error": str(exc)}
    emitter = harness_records.Emitter(bytearray(NONCE), child_pipes.MAX_MESSAGE_BYTES)
    return frame(emitter.encode({"suite": 0, **record}))


@settings(max_examples=1000, deadline=None)
@given(body=st.binary(max_size=200))
def test_any_reply_bytes_become_a_writable_record(body: bytes) -> None:
    through_the_grader(harness_record(body), CALL)


def _refuse(constant: str) -> object:
    raise AssertionError(f"a {constant} literal in a record: not JSON")


@settings(max_examples=1000, deadline=None)
@given(ok=st.sampled_from([True, False, "yes", None, 1]), value=json_like, error=json_like)
def test_any_reply_value_becomes_a_writable_record(ok: object, value: object, error: object) -> None:
    body = json.dumps({"ok": ok, "value": value, "error": error}, allow_nan=True).encode()
    record = harness_record(body)
    payload = record.strip().split(b" ", 2)[2]
    json.loads(payload, parse_constant=_refuse)  # a NaN or Infinity literal raises; the text "NaN" in a string not
    through_the_grader(record, CALL)


@settings(max_examples=500, deadline=None)
@given(value=json_like)
def test_reply_values_for_check_code_are_plain_or_refused(value: object) -> None:
    try:
        rich = typed_values.reply_value(value, rich=True)
        typed = typed_values.reply_value(value, rich=False)
    except (typed_values.NonPlainError, RecursionError):
        return
    json.dumps(typed, allow_nan=False)  # what the grader gets is always writable
    assert compare_values(typed, to_typed(rich)) is None  # and says the same as what the check sees


line_bodies = st.one_of(
    st.binary(max_size=60),
    json_like.map(lambda v: json.dumps(v, allow_nan=True).encode()),
    st.fixed_dictionaries(
        {"suite": st.sampled_from([0, 1, "0", None]), "id": st.sampled_from(["c", "check", "x", 0])},
        optional={"ok": st.booleans() | json_like, "value": json_like, "error": json_like, "stdout": json_like},
    ).map(lambda d: json.dumps(d, allow_nan=True).encode()),
)


def stdout_of(lines: list[tuple[str, bytes]]) -> bytes:
    """Framed records, records framed with another nonce, and raw bytes, in any order."""
    other = b"@@RS1 " + b"f" * 32 + b" "
    return b"".join(frame(b) if how == "framed" else (other + b + b"\n" if how == "other" else b) for how, b in lines)


stdout_lines = st.lists(st.tuples(st.sampled_from(["framed", "framed", "other", "raw"]), line_bodies), max_size=8).map(
    stdout_of
)


@settings(max_examples=1000, deadline=None)
@given(stdout=stdout_lines, truncated=st.booleans())
def test_the_grader_parses_any_stdout(stdout: bytes, truncated: bool) -> None:
    rest, output = split_output(hello() + stdout, NONCE)
    parsed = parse_records(rest, NONCE, truncated=truncated)
    for suite in (CALL, IO, CHECK):
        for sid in (0, 1):
            outcome = score_suite(suite, "public", parsed.cases.get(sid, {}))
            orjson.dumps([c.to_json() for c in outcome.cases])
    assert isinstance(output.stdout, bytes)
    if parsed.harness_error is not None:
        orjson.dumps(parsed.harness_error)


@settings(max_examples=300, deadline=None)
@given(actual=json_like, expected=json_like, atol=st.sampled_from([0.0, 1e-6, 1.0]))
def test_compare_never_raises(actual: Any, expected: Any, atol: float) -> None:
    reason = compare_values(actual, expected, atol)
    assert reason is None or isinstance(reason, str)


clean_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]))  # what a child can send
small_ints = st.integers(min_value=-(2**200), max_value=2**200)
python_values = st.recursive(
    st.one_of(st.none(), st.booleans(), small_ints, st.floats(allow_nan=False, allow_infinity=False), clean_text),
    lambda kids: st.one_of(
        st.lists(kids, max_size=3),
        st.lists(kids, max_size=3).map(tuple),
        st.frozensets(small_ints | clean_text, max_size=3),
        st.sets(small_ints, max_size=3),
        st.dictionaries(small_ints | clean_text | st.sampled_from(["$t", "$d"]), kids, max_size=3),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=python_values)
def test_child_encoding_then_parent_checking_round_trips(value: object) -> None:
    """What an honest child sends is accepted by its parent and compares equal to the value it encoded."""
    wire = json.loads(json.dumps(typed_values.encode_value(value)))
    typed = typed_values.reply_value(wire, rich=False)
    assert compare_values(typed, to_typed(value)) is None


@settings(max_examples=300, deadline=None)
@given(text=st.text())
def test_sanitized_text_is_always_writable(text: str) -> None:
    clean = sanitize_text(text)
    assert is_clean_text(clean)
    orjson.dumps(clean)
    assert sanitize_text(clean) == clean
    if is_clean_text(text):
        assert clean is text
