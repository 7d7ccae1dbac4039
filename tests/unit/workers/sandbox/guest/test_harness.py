"""The harness's value encoding and the outer record parser, as pure functions (no processes)."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from enum import IntEnum
from typing import Any

import pytest

from schemas.tasks import AssertSuite, CallSuite, IoSuite
from workers.grading.suites import (
    build_spec,
    harness_program,
    job_suite,
    new_nonce,
    order_for_harness,
    parse_records,
    score_suite,
)
from workers.sandbox.guest import typed_values


class MyInt(int):
    pass


class MyStr(str):
    __slots__ = ()


class MyList(list[int]):
    pass


class Color(IntEnum):
    RED = 1


class AlwaysEqual:
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


def gen() -> object:
    yield 1


@pytest.mark.parametrize(
    "value",
    [
        MyInt(1),
        MyStr("x"),
        MyList([1]),
        Color.RED,
        AlwaysEqual(),
        [AlwaysEqual()],
        {"a": AlwaysEqual()},
        math.nan,
        math.inf,
        -math.inf,
        [1.0, math.nan],
        gen(),
        range(3),
        b"bytes",
        1j,
        object(),
        2**5000,
        "x" * (typed_values.MAX_VALUE_BYTES + 1),
        list(range(typed_values.MAX_NODES + 1)),
    ],
)
def test_non_plain_values_are_refused(value: object) -> None:
    with pytest.raises(typed_values.NonPlainError):
        typed_values.encode_value(value)


def test_self_referencing_and_deep_values_are_refused() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(typed_values.NonPlainError):
        typed_values.encode_value(loop)
    d: dict[str, object] = {}
    d["d"] = d
    with pytest.raises(typed_values.NonPlainError):
        typed_values.encode_value(d)
    deep: object = 1
    for _ in range(typed_values.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(typed_values.NonPlainError):
        typed_values.encode_value(deep)


def test_wide_values_hit_the_node_budget() -> None:
    with pytest.raises(typed_values.NonPlainError):
        typed_values.encode_value([list(range(1000)) for _ in range(typed_values.MAX_NODES // 1000 + 2)])


def roundtrip(value: object, *, rich: bool = False) -> object:
    """``value`` as a child encodes it and the parent reads it back (typed JSON, or rich for check code)."""
    wire = json.dumps(typed_values.encode_value(value))
    return typed_values.reply_value(typed_values.strict_loads(wire), rich=rich)


def test_replies_become_typed_json_that_keeps_tuples_and_sets() -> None:
    assert roundtrip((1, [2, (3,)], {"k": (True, None)})) == {"$t": [1, [2, {"$t": [3]}], {"k": {"$t": [True, None]}}]}
    assert roundtrip({"a": 1.5}) == {"a": 1.5}
    assert roundtrip({1, 2}) in ({"$s": [1, 2]}, {"$s": [2, 1]})
    assert roundtrip(frozenset({"x"})) == {"$f": ["x"]}
    assert roundtrip({1: "a"}) == {"$d": [[1, "a"]]}
    assert roundtrip({"$t": 1}) == {"$d": [["$t", 1]]}  # a dict whose key looks like a tag stays a dict
    assert type(roundtrip(True)) is bool


def test_typed_json_from_replies_is_what_compare_reads() -> None:
    from workers.grading.compare import compare_values, to_typed

    for value in [(1, 2), {1, 2}, {(1, 2): frozenset({3})}, [{"a": (1,)}], {"$t": [1]}, None, 2**70, "x"]:
        assert compare_values(roundtrip(value), to_typed(value)) is None, value


def test_stdlib_dict_subclasses_are_read_as_plain_dicts() -> None:
    from collections import Counter, defaultdict

    assert roundtrip(Counter("aab")) == {"a": 2, "b": 1}
    assert roundtrip(OrderedDict(z=1, a=2)) == {"z": 1, "a": 2}
    assert roundtrip(defaultdict(list, k=[1])) == {"k": [1]}

    class Lying(Counter[str]):
        def items(self) -> Any:
            return [("x", 999)]

    with pytest.raises(typed_values.NonPlainError):  # user subclasses stay refused
        typed_values.encode_value(Lying("a"))


def test_rich_decoding_keeps_python_types_for_checks() -> None:
    value = (1, [2.5, "x"], {1: (2, 3)}, {4, 5}, frozenset({6}), None, False)
    assert roundtrip(value, rich=True) == value
    assert type(roundtrip((1,), rich=True)) is tuple


def test_non_finite_arguments_allowed_only_when_asked() -> None:
    enc = typed_values.encode_value([math.inf], allow_non_finite=True)
    assert typed_values.decode_value(enc) == [math.inf]
    with pytest.raises(typed_values.NonPlainError):
        typed_values.reply_value(enc, rich=True)


@pytest.mark.parametrize(
    "wire",
    ['{"$t": [1], "$d": []}', '{"x": 1}', '{"$d": [[1]]}', '{"$d": [[[1], 2]]}', '{"$x": "zero"}', '{"$t": 1}'],
)
def test_malformed_tagged_values_are_refused(wire: str) -> None:
    with pytest.raises(typed_values.NonPlainError):
        typed_values.decode_value(json.loads(wire))
    with pytest.raises(typed_values.NonPlainError):
        typed_values.reply_value(json.loads(wire), rich=True)


@pytest.mark.parametrize(
    "wire",
    [
        "1e999",  # json reads it as inf: the parent could not write it (allow_nan=False)
        "-1e999",
        '[1, {"$t": [1e400]}]',
        '{"$x": "inf"}',
        "1" * 1300,  # > MAX_INT_BITS
        '"\\ud800"',  # a lone surrogate: no UTF-8 for it
        '{"$d": [["\\udfff", 1]]}',
        "[" * 102 + "]" * 102,
        '{"$s": [[1]]}',
        '{"$d": [[{"$d": []}, 1]]}',
        '{"$d": [["a", 1], ["a", 2]]}',
        '{"$q": []}',
        '{"a": 1}',  # a child sends every dict as $d: a bare object is a forgery
    ],
)
def test_forged_reply_values_are_refused(wire: str) -> None:
    with pytest.raises(typed_values.NonPlainError):
        typed_values.reply_value(typed_values.strict_loads(wire), rich=False)


def test_strict_loads_refuses_nan_tokens() -> None:
    for bad in ("NaN", "[Infinity]", '{"a": -Infinity}'):
        with pytest.raises(typed_values.NonPlainError):
            typed_values.strict_loads(bad)


# ---- outer side: framing and scoring -------------------------------------------------------------------

NONCE = b"0123456789abcdef0123456789abcdef"


def frame(rec: dict[str, object], nonce: bytes = NONCE) -> bytes:
    return b"\n@@RS1 " + nonce + b" " + json.dumps(rec).encode() + b"\n"


HELLO = frame({"hello": True, "hardened": True, "stdin_ok": True})
CALL = CallSuite.model_validate(
    {"kind": "call", "cases": [{"args": [1], "expected": 2}, {"args": [2], "expected": [4, "x"]}]}
)


def test_only_frames_with_this_runs_nonce_count() -> None:
    other = b"f" * 32
    out = (
        HELLO
        + b"@@RS1 "
        + NONCE
        + b' {"suite": 0, "id": "0", "ok": true, "value": 2}\n'
        + frame({"suite": 0, "id": "1", "ok": True, "value": [4, "x"]}, other)
        + b'print("@@RS1 {\\"suite\\": 0}")\n'
    )
    recs = parse_records(out, NONCE)
    assert recs.hello is not None
    assert recs.protocol_error is None
    outcome = score_suite(CALL, "hidden", recs.cases.get(0, {}))
    assert [c.status for c in outcome.cases] == ["passed", "missing"]
    assert not outcome.all_passed


def test_duplicate_results_fail_the_case() -> None:
    out = HELLO + frame({"suite": 0, "id": "0", "ok": True, "value": 2}) * 2
    out += frame({"suite": 0, "id": "1", "ok": True, "value": [4, "x"]})
    outcome = score_suite(CALL, "hidden", parse_records(out, NONCE).cases[0])
    assert [c.status for c in outcome.cases] == ["error", "passed"]


def test_unparsable_frame_is_a_protocol_error_unless_cut_by_truncation() -> None:
    bad = HELLO + b"@@RS1 " + NONCE + b' {"suite": 0, "id": "0", "ok": tr\n' + frame({"done": True})
    assert parse_records(bad, NONCE).protocol_error is not None
    cut = HELLO + b"@@RS1 " + NONCE + b' {"suite": 0, "id": "0", "o'
    recs = parse_records(cut, NONCE, truncated=True)
    assert recs.protocol_error is None
    assert recs.cases == {}


def test_nan_in_a_record_is_a_protocol_error() -> None:
    out = HELLO + b"@@RS1 " + NONCE + b' {"suite": 0, "id": "0", "ok": true, "value": NaN}\n'
    assert parse_records(out, NONCE).protocol_error is not None


def test_lone_surrogates_never_leave_the_parser() -> None:
    """Candidate text enters our data here: repaired (messages) or refused (a value), once for every writer."""
    out = HELLO + b"@@RS1 " + NONCE + b' {"suite":0,"id":"0","ok":false,"error":"boom \\ud800 \\udfff"}\n'
    out += b"@@RS1 " + NONCE + b' {"suite":0,"id":"1","ok":true,"value":["\\ud800"]}\n'
    out += b"@@RS1 " + NONCE + b' {"suite":0,"id":"2","ok":false,"error":["not", "text"]}\n'
    out += b"@@RS1 " + NONCE + b' {"harness_error":"\\udc00"}\n'
    recs = parse_records(out, NONCE)
    assert recs.cases[0]["0"][0]["error"] == "boom \ufffd \ufffd"
    assert recs.cases[0]["1"][0]["ok"] is False
    assert "value" not in recs.cases[0]["1"][0]
    assert recs.cases[0]["2"][0]["error"] == "malformed error"
    assert recs.harness_error == "\ufffd"
    three = CallSuite.model_validate({"kind": "call", "cases": [{"args": [i], "expected": i} for i in range(3)]})
    outcome = score_suite(three, "public", recs.cases[0])
    assert [c.status for c in outcome.cases] == ["error", "error", "error"]
    import orjson

    orjson.dumps([c.to_json() for c in outcome.cases])


def test_a_valid_surrogate_pair_is_text() -> None:
    out = HELLO + b"@@RS1 " + NONCE + b' {"suite":0,"id":"0","ok":true,"value":"\\ud83d\\ude00"}\n'
    assert parse_records(out, NONCE).cases[0]["0"][0]["value"] == "\U0001f600"


def test_error_and_timeout_records() -> None:
    out = HELLO + frame({"suite": 0, "id": "0", "ok": False, "error": "timeout"})
    out += frame({"suite": 0, "id": "1", "ok": False, "error": "ZeroDivisionError"})
    outcome = score_suite(CALL, "public", parse_records(out, NONCE).cases[0])
    assert [c.status for c in outcome.cases] == ["timeout", "error"]


def test_unknown_case_ids_fail_the_whole_suite() -> None:
    out = HELLO + frame({"suite": 0, "id": "0", "ok": True, "value": 2})
    out += frame({"suite": 0, "id": "1", "ok": True, "value": [4, "x"]})
    out += frame({"suite": 0, "id": "zzz", "ok": True, "value": 1})
    outcome = score_suite(CALL, "hidden", parse_records(out, NONCE).cases[0])
    assert outcome.passed == 0


def test_io_and_assert_scoring() -> None:
    io = IoSuite.model_validate({"kind": "io", "cases": [{"stdin": "1", "expected_stdout": "2\n"}]})
    good = HELLO + frame({"suite": 0, "id": "0", "ok": True, "stdout": "2  \n\n", "stderr_tail": ""})
    assert score_suite(io, "hidden", parse_records(good, NONCE).cases[0]).all_passed
    no_stdout = HELLO + frame({"suite": 0, "id": "0", "ok": True})
    assert not score_suite(io, "hidden", parse_records(no_stdout, NONCE).cases[0]).all_passed
    check = AssertSuite.model_validate({"kind": "assert", "code": "def check(candidate):\n    pass\n"})
    ok = HELLO + frame({"suite": 0, "id": "check", "ok": True})
    assert score_suite(check, "hidden", parse_records(ok, NONCE).cases[0]).all_passed
    assert not score_suite(check, "hidden", {}).all_passed


def test_empty_suite_proves_nothing() -> None:
    empty = CallSuite.model_validate({"kind": "call", "cases": []})
    assert not score_suite(empty, "hidden", {}).all_passed


def test_expected_values_never_enter_the_sandbox() -> None:
    call = CallSuite.model_validate({"kind": "call", "cases": [{"args": ["in-arg"], "expected": "SECRET-EXPECTED-1"}]})
    io = IoSuite.model_validate({"kind": "io", "cases": [{"stdin": "in", "expected_stdout": "SECRET-EXPECTED-2"}]})
    jobs = [job_suite(call, 5.0), job_suite(io, 5.0)]
    spec = build_spec(
        code="def f(x):\n    return x\n",
        entry_point="f",
        suites=jobs,
        memory_mb=256,
        startup_grace_s=1.0,
        harness=harness_program(),
        nonce=new_nonce(),
    )
    blob = spec.stdin + b"".join(spec.files.values()) + " ".join(spec.argv).encode() + repr(spec.env).encode()
    assert b"SECRET-EXPECTED" not in blob
    assert b"in-arg" in blob


def test_assert_suites_run_last_and_are_counted_in_argv() -> None:
    check = AssertSuite.model_validate({"kind": "assert", "code": "def check(candidate):\n    pass\n"})
    jobs = [job_suite(check, 1.0), job_suite(CALL, 1.0)]
    assert order_for_harness(jobs) == [1, 0]
    spec = build_spec(
        code="",
        entry_point="f",
        suites=[jobs[1], jobs[0]],
        memory_mb=256,
        startup_grace_s=1.0,
        harness=harness_program(),
        nonce=new_nonce(),
    )
    assert spec.argv[-1] == "1"
    assert int(spec.argv[-2]) == len(spec.stdin) - len(harness_program().stdin())
    # Limits are per case: the assert suite may take its load and its check (2 x 1 s), the call suite a load
    # and a call per case (2 x 2 cases x 1 s), plus the start-up grace.
    assert len(CALL.cases) == 2
    assert spec.timeout_s == pytest.approx(2.0 + 4.0 + 1.0)


def test_nonces_are_fresh() -> None:
    assert len({new_nonce() for _ in range(100)}) == 100
    assert all(len(n) == 32 for n in (new_nonce(), new_nonce()))
