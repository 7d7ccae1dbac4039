"""The codec's error messages, table-driven: each invalid input and its exact one-line message."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from schemas.codec import MAX_MESSAGE_BYTES, Contract, DecodeError, EncodeError, decode, encode
from schemas.errors import ValidationError
from schemas.events import (
    CODE_INLINE_MAX_CHARS,
    DeadLetter,
    ExecutionResult,
    GenerationEvent,
    JudgeScore,
    SandboxRun,
)
from schemas.status import SandboxStatus
from schemas.tasks import Task

#: How a task's invalid ``language`` is reported: every supported language id.
LANGUAGE_CHOICES = (
    "input should be 'python', 'c', 'cpp', 'java', 'javascript', 'typescript', 'go', 'rust', 'bash', 'php', "
    "'ruby', 'lua', 'perl', 'r', 'csharp', 'kotlin', 'scala', 'racket', 'verilog' or 'd'"
)

GEN: dict[str, Any] = {
    "schema_version": "1.0",
    "event_id": "e1",
    "created_at": "2025-01-01T00:00:00Z",
    "generation_id": "g1",
    "episode_id": "g1",
    "run_id": "run-1",
    "task_id": "HumanEval/0",
    "turn": 0,
    "policy_version": "step-1",
    "code": "def f():\n    return 1\n",
}
TASK: dict[str, Any] = {
    "schema": "rewardstream.task/v1",
    "task_id": "demo/1",
    "prompt": "def add(a, b):\n",
    "entry_point": "add",
    "public_tests": {"kind": "call", "cases": [{"args": [1, 2], "expected": 3}]},
    "hidden_tests": {"kind": "call", "cases": [{"args": [2, 2], "expected": 4}, {"args": [0, 0], "expected": 0}]},
    "limits": {"timeout_s": 5, "memory_mb": 256},
}
RUN = {"status": "ok", "exit_code": 0, "wall_ms": 1.0, "cpu_ms": 1.0, "max_rss_kb": 1000, "backend": "process"}
EXEC: dict[str, Any] = {
    **{k: v for k, v in GEN.items() if k not in ("turn", "policy_version", "code")},
    "worker": "host:1",
    "suite_kind": "call",
    "run": RUN,
    "cases": [{"case_id": "0", "status": "failed"}],
    "passed": 0,
    "total": 1,
}
JUDGE: dict[str, Any] = {
    **{k: v for k, v in GEN.items() if k not in ("turn", "policy_version", "code")},
    "status": "ok",
    "score": 0.5,
    "judge_model": "j",
    "prompt_version": "p1",
    "latency_ms": 3.0,
}


def with_(base: dict[str, Any], path: str, value: Any) -> bytes:
    """``base`` with the value at dotted ``path`` replaced (``...`` deletes it), encoded."""
    doc = copy.deepcopy(base)
    *parents, last = path.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is ...:
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return orjson.dumps(doc)


def raw(base: dict[str, Any], path: str, token: str) -> bytes:
    """``base`` with a raw JSON token (e.g. NaN, which no encoder writes) at dotted ``path``."""
    return with_(base, path, "@@TOKEN@@").replace(b'"@@TOKEN@@"', token.encode())


def with_and(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Like ``with_`` but returns the document, for chaining two edits."""
    result: dict[str, Any] = orjson.loads(with_(base, path, value))
    return result


OVERSIZED = with_(GEN, "code", "x" * MAX_MESSAGE_BYTES)


INVALID: list[tuple[str, type[Contract], bytes, str]] = [
    ("not utf-8", GenerationEvent, b'{"code": "\xff"}', "invalid GenerationEvent: not UTF-8 (byte 10)"),
    (
        "not json",
        GenerationEvent,
        b'{"turn": ',
        "invalid GenerationEvent: not JSON: unexpected end of data: line 1 column 10 (char 9)",
    ),
    (
        "empty",
        GenerationEvent,
        b"",
        "invalid GenerationEvent: not JSON: Input is a zero-length, empty document: line 1 column 1 (char 0)",
    ),
    ("not an object", GenerationEvent, b"[1, 2]", "invalid GenerationEvent: input should be an object"),
    (
        "missing field",
        GenerationEvent,
        with_(GEN, "policy_version", ...),
        "invalid GenerationEvent: policy_version: required field is missing",
    ),
    ("extra field", GenerationEvent, with_(GEN, "colour", "red"), "invalid GenerationEvent: colour: unknown field"),
    (
        "string for int",
        GenerationEvent,
        with_(GEN, "turn", "1"),
        "invalid GenerationEvent: turn: input should be a valid integer",
    ),
    (
        "bool for int",
        GenerationEvent,
        with_(GEN, "turn", True),
        "invalid GenerationEvent: turn: input should be a valid integer",
    ),
    (
        "float for int",
        GenerationEvent,
        with_(GEN, "turn", 1.5),
        "invalid GenerationEvent: turn: input should be a valid integer",
    ),
    (
        "negative turn",
        GenerationEvent,
        with_(GEN, "turn", -1),
        "invalid GenerationEvent: turn: input should be greater than or equal to 0",
    ),
    (
        "naive timestamp",
        GenerationEvent,
        with_(GEN, "created_at", "2025-01-01T00:00:00"),
        "invalid GenerationEvent: created_at: input should have timezone info",
    ),
    (
        "bad id",
        GenerationEvent,
        with_(GEN, "episode_id", "a b"),
        "invalid GenerationEvent: episode_id: string should match pattern '^[A-Za-z0-9_.:-]{1,128}$'",
    ),
    (
        "unknown major version",
        GenerationEvent,
        with_(GEN, "schema_version", "2.0"),
        "invalid GenerationEvent: schema_version: unsupported major version 2 (this reader understands 1.x)",
    ),
    (
        "unknown major reported alone",
        GenerationEvent,
        with_(with_and(GEN, "turn", "x"), "schema_version", "2.3"),
        "invalid GenerationEvent: schema_version: unsupported major version 2 (this reader understands 1.x)",
    ),
    (
        "malformed version",
        GenerationEvent,
        with_(GEN, "schema_version", "one"),
        "invalid GenerationEvent: schema_version: malformed version 'one' (expected '1.0')",
    ),
    (
        "code and code_ref",
        GenerationEvent,
        with_(GEN, "code_ref", "s3://bucket/gen/g1.py"),
        "invalid GenerationEvent: code: exactly one of code, code_ref and workspace_ref must be set",
    ),
    (
        "code_ref without sha",
        GenerationEvent,
        with_(with_and(GEN, "code", ...), "code_ref", "s3://bucket/a.py"),
        "invalid GenerationEvent: code_sha256: required when code_ref is set",
    ),
    (
        "code and workspace_ref",
        GenerationEvent,
        with_(with_and(GEN, "workspace_ref", "s3://bucket/episodes/e1.tar"), "workspace_sha256", "a" * 64),
        "invalid GenerationEvent: code: exactly one of code, code_ref and workspace_ref must be set",
    ),
    (
        "workspace_ref without sha",
        GenerationEvent,
        with_(with_and(GEN, "code", ...), "workspace_ref", "s3://bucket/episodes/e1.tar"),
        "invalid GenerationEvent: workspace_sha256: workspace_ref and workspace_sha256 go together",
    ),
    (
        "transcript without a workspace",
        GenerationEvent,
        with_(GEN, "transcript_ref", "s3://bucket/sha256/ab/" + "ab" * 32),
        "invalid GenerationEvent: transcript_ref: an episode's transcript goes with its workspace_ref",
    ),
    (
        "code over inline cap",
        GenerationEvent,
        with_(GEN, "code", "x" * (CODE_INLINE_MAX_CHARS + 1)),
        f"invalid GenerationEvent: code: string should have at most {CODE_INLINE_MAX_CHARS} characters",
    ),
    (
        "oversized message",
        GenerationEvent,
        OVERSIZED,
        f"invalid GenerationEvent: message is {len(OVERSIZED)} bytes, over the {MAX_MESSAGE_BYTES}-byte cap",
    ),
    ("NaN float", JudgeScore, raw(JUDGE, "score", "NaN"), "invalid JudgeScore: score: NaN/Infinity is not allowed"),
    (
        "Infinity float",
        JudgeScore,
        raw(JUDGE, "latency_ms", "Infinity"),
        "invalid JudgeScore: latency_ms: NaN/Infinity is not allowed",
    ),
    (
        "score out of range",
        JudgeScore,
        with_(JUDGE, "score", 1.5),
        "invalid JudgeScore: score: input should be less than or equal to 1",
    ),
    (
        "score without ok",
        JudgeScore,
        with_(JUDGE, "status", "error"),
        "invalid JudgeScore: score: set exactly when status is ok",
    ),
    (
        "count mismatch",
        ExecutionResult,
        with_(EXEC, "passed", 1),
        "invalid ExecutionResult: passed: 1 does not match 0 passed case results",
    ),
    (
        "bad nested status",
        ExecutionResult,
        with_(EXEC, "run.status", "fine"),
        "invalid ExecutionResult: run.status: input should be 'ok', 'nonzero_exit', 'timeout', 'memory_limit', "
        "'output_limit', 'killed', 'crashed', 'sandbox_error', 'compile_error', 'compile_timeout' or "
        "'unsupported_language'",
    ),
    (
        "args not a list",
        Task,
        with_(TASK, "hidden_tests.cases.0.args", 3),
        "invalid Task: hidden_tests.cases[0].args: input should be a valid array",
    ),
    (
        "NaN in args",
        Task,
        raw(TASK, "hidden_tests.cases.1.args.0", "NaN"),
        "invalid Task: hidden_tests.cases[1].args[0]: NaN/Infinity is not allowed",
    ),
    (
        "Infinity in expected",
        Task,
        raw(TASK, "public_tests.cases.0.expected", "[1, -Infinity]"),
        "invalid Task: public_tests.cases[0].expected[1]: NaN/Infinity is not allowed",
    ),
    (
        "missing expected",
        Task,
        with_(TASK, "hidden_tests.cases.0.expected", ...),
        "invalid Task: hidden_tests.cases[0].expected: required field is missing",
    ),
    (
        "typo in case field",
        Task,
        with_(TASK, "hidden_tests.cases.0.kwarg", {}),
        "invalid Task: hidden_tests.cases[0].kwarg: unknown field",
    ),
    (
        "unknown suite kind",
        Task,
        with_(TASK, "hidden_tests.kind", "fuzz"),
        "invalid Task: hidden_tests.kind: must be one of 'call', 'io', 'assert', 'verifier' (got 'fuzz')",
    ),
    (
        "missing suite kind",
        Task,
        with_(TASK, "hidden_tests.kind", ...),
        "invalid Task: hidden_tests.kind: required field is missing",
    ),
    (
        "io case missing stdout",
        Task,
        with_(TASK, "hidden_tests", {"kind": "io", "cases": [{"stdin": "1"}]}),
        "invalid Task: hidden_tests.cases[0].expected_stdout: required field is missing",
    ),
    (
        "empty assert code",
        Task,
        with_(TASK, "hidden_tests", {"kind": "assert", "code": ""}),
        "invalid Task: hidden_tests.code: string should have at least 1 character",
    ),
    (
        "duplicate case ids",
        Task,
        with_(TASK, "hidden_tests.cases", [{"id": "a", "expected": 1}] * 2),
        "invalid Task: hidden_tests.cases: duplicate case id 'a'",
    ),
    (
        "entry point missing",
        Task,
        with_(TASK, "entry_point", ...),
        "invalid Task: entry_point: required for call and assert tests",
    ),
    (
        "entry point not identifier",
        Task,
        with_(TASK, "entry_point", "os.system"),
        "invalid Task: entry_point: must be a function name, or module:function on workspace tasks "
        "(e.g. add, calc.ops:add)",
    ),
    (
        "string timeout",
        Task,
        with_(TASK, "limits.timeout_s", "5"),
        "invalid Task: limits.timeout_s: input should be a valid number",
    ),
    (
        "zero timeout",
        Task,
        with_(TASK, "limits.timeout_s", 0),
        "invalid Task: limits.timeout_s: input should be greater than 0",
    ),
    (
        "task major version",
        Task,
        with_(TASK, "schema", "rewardstream.task/v2"),
        "invalid Task: schema: unsupported major version 2 (this reader understands 1.x)",
    ),
    (
        "several problems",
        Task,
        with_(with_and(TASK, "task_id", 7), "language", "cobol"),
        f"invalid Task: task_id: input should be a valid string; language: {LANGUAGE_CHOICES}",
    ),
    (
        "bad base64",
        DeadLetter,
        orjson.dumps(
            {
                "source_topic": "rs.generations",
                "source_partition": 0,
                "source_offset": 1,
                "component": "executor",
                "error": "x",
                "error_type": "DecodeError",
                "payload_b64": "not base64!",
                "payload_size": 3,
            }
        ),
        "invalid DeadLetter: payload_b64: string should match pattern '^[A-Za-z0-9+/]*={0,2}$'",
    ),
]


@pytest.mark.parametrize(("model", "data", "message"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_input_message(model: type[Contract], data: bytes, message: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(data, model)
    assert str(caught.value) == message
    assert isinstance(caught.value, ValidationError)
    assert "\n" not in str(caught.value)


def test_problems_are_structured() -> None:
    with pytest.raises(DecodeError) as caught:
        decode(with_(TASK, "hidden_tests.cases.0.args", 3), Task)
    assert caught.value.problems == (("hidden_tests.cases[0].args", "input should be a valid array"),)
    assert caught.value.model == "Task"


@pytest.mark.parametrize(
    ("model", "base"), [(GenerationEvent, GEN), (Task, TASK), (ExecutionResult, EXEC), (JudgeScore, JUDGE)]
)
def test_valid_bases_decode(model: type[Contract], base: dict[str, Any]) -> None:
    decoded = decode(orjson.dumps(base), model)
    assert decode(encode(decoded), model) == decoded


def test_newer_minor_version_ignores_unknown_fields() -> None:
    newer = with_and(with_and(GEN, "schema_version", "1.7"), "reviewer", "bob")
    newer["metadata"] = {"a": "b"}
    event = decode(orjson.dumps(newer), GenerationEvent)
    assert event.schema_version == "1.7"
    assert event.metadata == {"a": "b"}


def test_newer_minor_version_still_reports_real_errors() -> None:
    newer = with_and(with_and(with_and(GEN, "schema_version", "1.7"), "reviewer", "bob"), "turn", "x")
    with pytest.raises(DecodeError, match=r"^invalid GenerationEvent: turn: input should be a valid integer$"):
        decode(orjson.dumps(newer), GenerationEvent)


def test_newer_minor_task_ignores_unknown_nested_fields() -> None:
    newer = with_and(with_and(TASK, "schema", "rewardstream.task/v1.2"), "hidden_tests.cases.0.weight", 2)
    task = decode(orjson.dumps(newer), Task)
    assert task.hidden_tests.kind == "call"
    assert task.hidden_tests.cases[0].expected == 4


def test_case_ids_default_to_index_and_survive_round_trip() -> None:
    task = decode(orjson.dumps(TASK), Task)
    assert task.hidden_tests.kind == "call"
    assert [c.id for c in task.hidden_tests.cases] == ["0", "1"]
    assert task.hidden_tests.case_ids() == ["0", "1"]
    assert b'"id":"1"' in encode(task)


def test_public_view_has_no_hidden_tests() -> None:
    task = decode(orjson.dumps(TASK), Task)
    public = task.public()
    assert "hidden_tests" not in public.model_dump()
    assert b"hidden" not in encode(public)
    assert public.public_tests == task.public_tests


def test_encode_refuses_oversized() -> None:
    letter = DeadLetter.capture(
        source_topic="t",
        source_partition=0,
        source_offset=0,
        component="c",
        error=ValueError("boom"),
        key=b"k",
        value=b"v",
    )
    assert decode(encode(letter), DeadLetter).payload() == b"v"

    class Tiny(SandboxRun):
        max_bytes = 10

    with pytest.raises(EncodeError, match=r"^Tiny is \d+ bytes, over the 10-byte cap"):
        encode(Tiny(status=SandboxStatus.OK, wall_ms=1, cpu_ms=1, max_rss_kb=1, backend="process"))


def test_dead_letter_truncates_large_payloads() -> None:
    big = b"x" * (600 * 1024)
    letter = DeadLetter.capture(
        source_topic="t",
        source_partition=1,
        source_offset=2,
        component="c",
        error=DecodeError("GenerationEvent", [("turn", "bad")]),
        key=None,
        value=big,
    )
    assert letter.payload_truncated
    assert letter.payload_size == len(big)
    assert letter.error == "invalid GenerationEvent: turn: bad"
    assert letter.error_type == "DecodeError"
    assert len(encode(letter)) < MAX_MESSAGE_BYTES


def test_an_episode_generation_names_its_snapshot_and_a_one_shot_one_is_unchanged_on_the_wire() -> None:
    """The episode fields travel only when set: a one-shot generation's bytes are what older readers know."""
    one_shot = decode(orjson.dumps(GEN), GenerationEvent)
    assert b"workspace" not in encode(one_shot)
    episode = one_shot.model_copy(
        update={"code": None, "workspace_ref": "s3://bucket/episodes/e1.tar", "workspace_sha256": "b" * 64}
    )
    wire = orjson.loads(encode(episode))
    assert (wire["workspace_ref"], wire["workspace_sha256"], wire["code"]) == (
        "s3://bucket/episodes/e1.tar",
        "b" * 64,
        None,
    )
    assert decode(encode(episode), GenerationEvent) == episode


def test_an_episode_generation_names_its_transcript_and_a_one_shot_one_stays_byte_identical() -> None:
    one_shot = decode(orjson.dumps(GEN), GenerationEvent)
    assert b"transcript" not in encode(one_shot)
    assert encode(decode(encode(one_shot), GenerationEvent)) == encode(one_shot)
    fields = {"code": None, "workspace_ref": "s3://bucket/e1.tar", "workspace_sha256": "b" * 64,
              "transcript_ref": "s3://bucket/sha256/cd/" + "cd" * 32}  # fmt: skip
    episode = one_shot.model_copy(update=fields)
    again = decode(encode(episode), GenerationEvent)
    assert again.transcript_ref == "s3://bucket/sha256/cd/" + "cd" * 32
    assert again == episode
