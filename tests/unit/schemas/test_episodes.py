"""Agent actions and observations: the contract's JSON, refusals that name the field, rejections with a
reason, observations that are safe to store and fit one message, and fuzzing through the codec."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import orjson
import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.codec import MAX_MESSAGE_BYTES, DecodeError, decode, encode
from schemas.episodes import (
    CONTENT_MAX_CHARS,
    MAX_WRITE_BYTES,
    REASON_MAX_CHARS,
    ActionEvent,
    ContentClaim,
    EventWriteAction,
    ExecAction,
    ObservationEvent,
    ReadAction,
    WriteAction,
    action_problem,
    claim_of,
    write_size,
)
from schemas.events import OUTPUT_TAIL_MAX_CHARS
from schemas.paths import MAX_PATH_BYTES
from schemas.status import SandboxStatus
from tests.unit.schemas.test_codec_fuzz import decode_only_decode_error

#: The actions of the contract, verbatim (one per line for ``episode play``, the objects the SDK sends).
CONTRACT_ACTIONS = [
    '{"action": "read", "path": "calc/ops.py"}',
    '{"action": "exec", "command": "python -m pytest -q", "timeout_s": 10}',
    '{"action": "exec", "command": ["python", "-m", "pytest", "-q"], "timeout_s": 10}',
    '{"action": "write", "path": "calc/ops.py", "text": "def add(a, b):\\n    return a + b\\n"}',
    '{"action": "write", "path": "calc/data.bin", "base64": "AAEC/w=="}',
    '{"action": "submit"}',
]
STARTS = [
    '{"action": "open", "task_id": "swe/calc-1", "run_id": "run-7"}',
    '{"action": "open", "task_id": "swe/calc-1"}',
    '{"action": "fork", "from_episode": "ep-1", "turn": 3}',
    # a fork's own run and policy (another run's trainer forking): its reward goes to that run
    '{"action": "fork", "from_episode": "ep-1", "turn": 3, "run_id": "run-b", "policy_version": "step-9"}',
]


def event(action: str | dict[str, Any], turn: int = 1, **extra: Any) -> bytes:
    """An action event's bytes around ``action`` (a JSON text or an object)."""
    body = orjson.loads(action) if isinstance(action, str) else action
    return orjson.dumps({"episode_id": "ep-2", "turn": turn, "action": body, **extra})


@pytest.mark.parametrize("line", CONTRACT_ACTIONS + STARTS)
def test_contract_actions_decode_and_encode_as_written(line: str) -> None:
    turn = 0 if line in STARTS else 1
    decoded = decode(event(line, turn), ActionEvent)
    assert decoded.key() == b"ep-2"
    assert decoded.turn == turn
    assert action_problem(decoded.action) is None
    wire = orjson.loads(encode(decoded))
    assert wire["action"] == orjson.loads(line) | ({"timeout_s": 10.0} if "timeout_s" in line else {})
    assert set(wire) == {"schema_version", "event_id", "created_at", "episode_id", "turn", "action"}
    assert decode(encode(decoded), ActionEvent) == decoded


def test_a_write_gives_its_bytes() -> None:
    text = decode(event(CONTRACT_ACTIONS[3]), ActionEvent).action
    raw = decode(event(CONTRACT_ACTIONS[4]), ActionEvent).action
    assert isinstance(text, WriteAction)
    assert isinstance(raw, WriteAction)
    assert text.data() == b"def add(a, b):\n    return a + b\n"
    assert raw.data() == b"\x00\x01\x02\xff"


REFUSED: list[tuple[str, bytes, str]] = [
    ("unknown action", event({"action": "fly"}), "action.action: must be one of 'exec', 'write', 'read', 'submit', "
     "'open', 'fork' (got 'fly')"),
    ("no action kind", event({"path": "a"}), "action.action: required field is missing"),
    ("no action", orjson.dumps({"episode_id": "e", "turn": 1}), "action: required field is missing"),
    ("no content", event({"action": "write", "path": "a"}), "action.text: one of text, base64 and content must be "
     "set"),
    ("claim without sha", event({"action": "write", "path": "a", "content": {"ref": "s3://bkt/x", "size": 1}}),
     "action.content.sha256: required field is missing"),
    ("claim of a negative size", event({"action": "write", "path": "a", "content": {"ref": "s3://bkt/x",
     "sha256": "ab" * 32, "size": -1}}), "action.content.size: input should be greater than or equal to 0"),
    ("claim to a web page", event({"action": "write", "path": "a", "content": {"ref": "https://evil/x",
     "sha256": "ab" * 32, "size": 1}}), "action.content.ref: string should match pattern "
     "'^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^\\s]{1,1024}$'"),
    ("string timeout", event({"action": "exec", "command": "ls", "timeout_s": "10"}),
     "action.timeout_s: input should be a valid number"),
    ("command not text", event({"action": "exec", "command": 3}),
     "action.command: input should be a valid string; action.command: input should be a valid array"),
    ("unknown field", event({"action": "read", "path": "a", "follow": True}), "action.follow: unknown field"),
    ("open later", event(STARTS[0], 4), "turn: must be 0 for open and fork (they start an episode)"),
    ("exec at turn 0", event(CONTRACT_ACTIONS[1], 0), "turn: turn 0 is the episode's open or fork"),
    ("negative turn", event(CONTRACT_ACTIONS[0], -1), "turn: input should be greater than or equal to 0"),
    ("bad episode id", orjson.dumps({"episode_id": "a b", "turn": 1, "action": {"action": "submit"}}),
     "episode_id: string should match pattern '^[A-Za-z0-9_.:-]{1,128}$'"),
    ("bad task id", event({"action": "open", "task_id": "../x"}, 0),
     "action.task_id: string should match pattern '^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$'"),
    ("fork without turn", event({"action": "fork", "from_episode": "e"}, 0), "action.turn: required field is missing"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "message"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_undecodable_actions_name_the_field(data: bytes, message: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(data, ActionEvent)
    assert str(caught.value) == f"invalid ActionEvent: {message}"


DECODABLE_BUT_INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("text and base64", {"action": "write", "path": "a", "text": "x", "base64": "eA=="}, "both text and base64"),
    (
        "text and a claim",
        {"action": "write", "path": "a", "text": "x", "content": {"ref": "s3://bkt/x", "sha256": "ab" * 32, "size": 1}},
        "both inline content and a content claim",
    ),
    (
        "claim over the cap",
        {
            "action": "write",
            "path": "a",
            "content": {"ref": "s3://bkt/x", "sha256": "ab" * 32, "size": MAX_WRITE_BYTES + 1},
        },
        f"write of {MAX_WRITE_BYTES + 1} bytes is over the {MAX_WRITE_BYTES}-byte cap",
    ),
    ("zero timeout", {"action": "exec", "command": "ls", "timeout_s": 0}, "timeout_s must be more than 0"),
    ("negative timeout", {"action": "exec", "command": "ls", "timeout_s": -3}, "timeout_s must be more than 0"),
    ("timeout over a day", {"action": "exec", "command": "ls", "timeout_s": 86_401}, "at most 86400 s"),
]


@pytest.mark.parametrize(("body", "reason"), [c[1:] for c in DECODABLE_BUT_INVALID],
                         ids=[c[0] for c in DECODABLE_BUT_INVALID])  # fmt: skip
def test_decodable_but_invalid_actions_decode_and_are_the_agents_to_learn_from(
    body: dict[str, Any], reason: str
) -> None:
    """Only what is not an action at all goes to the DLQ: these decode, and ``action_problem`` says why they
    are ``rejected`` (an observation the agent sees, its turn used)."""
    decoded = decode(event(body), ActionEvent)
    problem = action_problem(decoded.action)
    assert problem is not None
    assert reason in problem, problem


def _write(path: str = "a.py", **content: str) -> WriteAction:
    return WriteAction(action="write", path=path, **content)


def _claimed(path: str = "a.py", size: int = 5) -> EventWriteAction:
    sha = "ab" * 32
    claim = ContentClaim(ref=f"s3://bkt/sha256/ab/{sha}", sha256=sha, size=size)
    return EventWriteAction(action="write", path=path, content=claim)


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        (_write("../../etc/passwd", text="x"), "path has a '..' segment (it would leave the workspace)"),
        (_write("/etc/passwd", text="x"), "path is absolute (paths are relative to the workspace)"),
        (_write("", text="x"), "path is empty"),
        (_write("a\x00b", text="x"), "path contains a NUL byte"),
        (_write("a/./b", text="x"), "path is not normalised (empty or '.' segment)"),
        (_write("a/" * MAX_PATH_BYTES, text="x"), f"path is {2 * MAX_PATH_BYTES} bytes, over the 1024-byte cap"),
        (ReadAction(action="read", path="x/../../y"), "path has a '..' segment (it would leave the workspace)"),
        (_claimed(size=MAX_WRITE_BYTES + 1), f"write of {MAX_WRITE_BYTES + 1} bytes is over the "
         f"{MAX_WRITE_BYTES}-byte cap"),  # the size the claim declares: nothing is read
        (_claimed("../x", size=5), "path has a '..' segment (it would leave the workspace)"),
        (_write(base64="not base64!"), "base64 is not valid base64"),
        (_write(base64="eA"), "base64 is not valid base64"),  # no padding
        (_write(text="\ud800"), "text is not valid UTF-8"),
        (ExecAction(action="exec", command="  "), "command is empty"),
        (ExecAction(action="exec", command=[]), "command argv is empty"),
        (ExecAction(action="exec", command=["", "-c"]), "command argv[0] is empty"),
        (ExecAction(action="exec", command="ls\x00"), "command contains a NUL byte"),
        # decodable, so the agent's to learn from (a rejected observation), never a dead letter
        (_write(text="x", base64="eA=="), "write has both text and base64 (send exactly one)"),
        (ExecAction(action="exec", command="ls", timeout_s=0), "timeout_s must be more than 0 and at most 86400 s "
         "(got 0)"),
        (ExecAction(action="exec", command="ls", timeout_s=-1.5), "timeout_s must be more than 0 and at most 86400 s "
         "(got -1.5)"),
        (ExecAction(action="exec", command="ls", timeout_s=86_401), "timeout_s must be more than 0 and at most "
         "86400 s (got 86401)"),
    ],
)  # fmt: skip
def test_rejections_say_why(action: WriteAction | ReadAction | ExecAction, reason: str) -> None:
    assert action_problem(action) == reason


def test_a_write_at_the_cap_is_fine_by_claim_check_and_its_event_is_small() -> None:
    action = _claimed(size=MAX_WRITE_BYTES)
    assert (action_problem(action), write_size(action), claim_of(action)) == (None, MAX_WRITE_BYTES, action.content)
    wire = encode(ActionEvent(episode_id="e", turn=1, action=action))
    assert len(wire) < 1024
    assert decode(wire, ActionEvent).action == action


def test_an_inline_write_is_byte_identical_on_the_wire_and_an_agents_model_is_taken_as_it_is() -> None:
    """The claim field is left out when unset: an inline write encodes as before the claim existed."""
    line = CONTRACT_ACTIONS[3]
    agents = WriteAction.model_validate_json(line)
    from_model = ActionEvent(episode_id="ep-2", turn=1, action=agents, event_id="e1",  # type: ignore[arg-type]
                             created_at=datetime(2026, 1, 2, tzinfo=UTC))  # fmt: skip
    assert isinstance(from_model.action, EventWriteAction)
    assert claim_of(from_model.action) is None
    assert encode(from_model) == (
        b'{"schema_version":"1.0","event_id":"e1","created_at":"2026-01-02T00:00:00Z","episode_id":"ep-2",'
        b'"turn":1,"action":{"action":"write","path":"calc/ops.py","text":"def add(a, b):\\n    return a + b\\n"}}'
    )


def test_only_the_trainers_side_makes_a_claim_check() -> None:
    """The agent's contract has no content field: a model or a transcript cannot name an object in S3."""
    claim = {"ref": "s3://bkt/sha256/ab/" + "ab" * 32, "sha256": "ab" * 32, "size": 1}
    with pytest.raises(pydantic.ValidationError, match="content"):
        WriteAction.model_validate({"action": "write", "path": "a", "content": claim})


# ---- observations --------------------------------------------------------------------------------------------


def test_build_makes_the_agents_output_safe_and_capped() -> None:
    observed = ObservationEvent.build(
        episode_id="ep-2",
        turn=3,
        action="exec",
        status=SandboxStatus.NONZERO_EXIT,
        exit_code=1,
        stdout=b"x" * OUTPUT_TAIL_MAX_CHARS + b"END\xff",
        stderr="boom \ud800",
        wall_ms=12.5,
        workspace_ref="s3://snapshots/sha256/ab/" + "ab" * 32,
    )
    assert observed.stdout_truncated
    assert observed.stdout.endswith("END\ufffd")  # the end is kept: that is where the error is
    assert len(observed.stdout) == OUTPUT_TAIL_MAX_CHARS
    assert observed.stderr == "boom \ufffd"
    assert not observed.stderr_truncated
    assert decode(encode(observed), ObservationEvent) == observed
    assert observed.key() == b"ep-2"


def test_a_read_keeps_the_start_of_the_file() -> None:
    observed = ObservationEvent.build(
        episode_id="e", turn=1, action="read", status=SandboxStatus.OK, content=b"HEAD" + b"y" * CONTENT_MAX_CHARS
    )
    assert observed.content is not None
    assert observed.content.startswith("HEAD")
    assert len(observed.content) == CONTENT_MAX_CHARS
    assert observed.content_truncated


def test_an_observation_at_every_cap_fits_one_message() -> None:
    worst = "\x01"  # escaped as \\u0001: six bytes for one character
    observed = ObservationEvent.build(
        episode_id="e" * 128,
        turn=10_000,
        action="read",
        status=SandboxStatus.OK,
        stdout=worst * (2 * OUTPUT_TAIL_MAX_CHARS),
        stderr=worst * (2 * OUTPUT_TAIL_MAX_CHARS),
        content=worst * (2 * CONTENT_MAX_CHARS),
        reason=worst * (2 * REASON_MAX_CHARS),
        workspace_ref="s3://snapshots/" + "k" * 1024,
    )
    assert len(encode(observed)) < MAX_MESSAGE_BYTES


def test_lone_surrogates_from_a_producer_are_replaced_on_decode() -> None:
    raw = {"episode_id": "e", "turn": 1, "action": "exec", "status": "ok", "stdout": "a\ud800", "reason": "\udfff"}
    observed = ObservationEvent.model_validate(raw)
    assert observed.stdout == "a\ufffd"
    assert observed.reason == "\ufffd"
    encode(observed)


def test_a_rejection_answers_its_action() -> None:
    action = decode(event({"action": "write", "path": "../x", "text": "x"}, 5), ActionEvent)
    reason = action_problem(action.action)
    assert reason is not None
    observed = ObservationEvent.rejection(action, reason)
    assert (observed.turn, observed.action, observed.status) == (5, "write", "rejected")
    assert observed.reason == "path has a '..' segment (it would leave the workspace)"


def test_an_abandoned_episode_is_explicit() -> None:
    observed = ObservationEvent.build(
        episode_id="e",
        turn=4,
        action=None,
        status=SandboxStatus.TIMEOUT,
        reason="no action for 300 s",
        ended="abandoned",
    )
    wire = orjson.loads(encode(observed))
    assert (wire["action"], wire["status"], wire["ended"]) == (None, "timeout", "abandoned")
    assert set(wire) == {
        "schema_version", "event_id", "created_at", "episode_id", "turn", "action", "status", "exit_code",
        "stdout", "stderr", "stdout_truncated", "stderr_truncated", "content", "content_truncated", "wall_ms",
        "workspace_ref", "reason", "ended",
    }  # fmt: skip


BASE: dict[str, Any] = {"episode_id": "e", "turn": 1, "action": "exec", "status": "ok"}
INCONSISTENT: list[tuple[dict[str, Any], str]] = [
    ({"status": "rejected"}, "reason: required when status is rejected"),
    ({"action": None}, "ended: an observation that answers no action ends the episode (abandoned or episode_timeout)"),
    ({"ended": "abandoned"}, "action: an abandoned episode's last observation answers no action"),
    ({"ended": "submitted"}, "ended: submitted is the end of a submit"),
    ({"content": "x"}, "content: only a read has content"),
    ({"action": "read", "content_truncated": True}, "content_truncated: set without content"),
    ({"action": "write", "exit_code": 0}, "exit_code: only an exec has an exit code"),
    ({"status": "exploded"}, "status: input should be 'ok', 'nonzero_exit', 'timeout', 'memory_limit', "
     "'output_limit', 'killed', 'crashed', 'sandbox_error' or 'rejected'"),
    ({"action": "fly"}, "action: input should be 'exec', 'write', 'read', 'submit', 'open' or 'fork'"),
    ({"stdout": "x" * (OUTPUT_TAIL_MAX_CHARS + 1)}, "stdout: string should have at most 8192 characters"),
    ({"wall_ms": -1}, "wall_ms: input should be greater than or equal to 0"),
]  # fmt: skip


@pytest.mark.parametrize(("edit", "message"), INCONSISTENT, ids=[m.split(":")[0] for _, m in INCONSISTENT])
def test_inconsistent_observations_name_the_field(edit: dict[str, Any], message: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(orjson.dumps(BASE | edit), ObservationEvent)
    assert str(caught.value) == f"invalid ObservationEvent: {message}"


# ---- fuzz: whatever the bytes, only DecodeError ----------------------------------------------------------------

any_text = st.text(st.characters(exclude_categories=()), max_size=40)
json_leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text
json_docs = st.recursive(
    json_leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4), max_leaves=20
)
action_shapes = st.fixed_dictionaries(
    {"action": st.sampled_from(["exec", "write", "read", "submit", "open", "fork", "x"]) | json_docs},
    optional={
        k: json_docs | any_text
        for k in ("command", "timeout_s", "path", "text", "base64", "task_id", "run_id", "from_episode", "turn")
    },
)


@given(doc=st.dictionaries(st.sampled_from(["episode_id", "turn", "action", "schema_version", "x"]), json_docs))
def test_any_json_is_only_a_decode_error(doc: dict[str, Any]) -> None:
    data = json.dumps(doc).encode()  # lone surrogates become \\ud800 escapes
    decode_only_decode_error(data, ActionEvent)
    decode_only_decode_error(data, ObservationEvent)


@given(action=action_shapes, turn=st.integers(-2, 10_002) | json_docs)
def test_action_shaped_json_is_decoded_or_refused_and_decoded_ones_are_judged(action: Any, turn: Any) -> None:
    data = json.dumps({"episode_id": "e", "turn": turn, "action": action}).encode()
    decoded = decode_only_decode_error(data, ActionEvent)
    if isinstance(decoded, ActionEvent):
        why = action_problem(decoded.action)
        assert why is None or isinstance(why, str)


@given(
    field=st.sampled_from(["stdout", "content", "reason", "action", "workspace_ref", "turn"]),
    depth=st.integers(1, 5000),
    text=st.sampled_from(["\\ud800", "\\udfff\\ud800", "x" * 20_000, "\\u0000", "\\"]),
)
def test_deep_nesting_huge_strings_and_surrogates(field: str, depth: int, text: str) -> None:
    nested = ("[" * depth + f'"{text}"' + "]" * depth).encode()
    observation = orjson.dumps(BASE | {"action": "read", field: "@@"}).replace(b'"@@"', nested)
    decode_only_decode_error(observation, ObservationEvent)
    flat = orjson.dumps(BASE | {"action": "read", field: "@@"}).replace(b"@@", text.encode())
    decode_only_decode_error(flat, ObservationEvent)
    action = event({"action": "write", "path": "@@", "text": "@@"}).replace(b'"@@"', nested, 1)
    decode_only_decode_error(action, ActionEvent)
    decode_only_decode_error(
        event({"action": "write", "path": "@@", "text": "x"}).replace(b"@@", text.encode()), ActionEvent
    )


@given(path=any_text, text=any_text, b64=st.text(max_size=40), command=any_text | st.lists(any_text, max_size=4))
def test_action_problem_never_raises(path: str, text: str, b64: str, command: str | list[str]) -> None:
    for action in (
        _write(path, text=text),
        _write(path, base64=b64),
        ReadAction(action="read", path=path),
        ExecAction(action="exec", command=command),
    ):
        why = action_problem(action)
        assert why is None or isinstance(why, str)


@given(stdout=st.binary(max_size=20_000), content=any_text, reason=any_text)
def test_build_never_fails_for_what_a_program_wrote(stdout: bytes, content: str, reason: str) -> None:
    observed = ObservationEvent.build(
        episode_id="e", turn=1, action="read", status=SandboxStatus.OK, stdout=stdout, content=content, reason=reason
    )
    assert decode(encode(observed), ObservationEvent) == observed


def test_a_python_built_write_refuses_nothing_at_decode_time() -> None:
    """Paths and sizes are the agent's: a model built with any of them is fine, the worker rejects it."""
    with pytest.raises(pydantic.ValidationError):
        WriteAction(action="write", path="a")  # neither text nor base64: structural, a decode error
    assert _write("../x", text="x").path == "../x"


def test_an_observation_names_its_image_only_when_it_has_one() -> None:
    """A workspace task's step encodes as before ``image_id``; an image task's step round-trips it."""
    plain = ObservationEvent.build(episode_id="ep", turn=1, action="exec", status=SandboxStatus.OK, exit_code=0)
    assert b'"image_id"' not in encode(plain)
    image_id = "sha256:" + "c3" * 32
    stepped = ObservationEvent.build(episode_id="ep", turn=1, action="exec", status=SandboxStatus.OK, exit_code=0,
                                     image_id=image_id)  # fmt: skip
    assert decode(encode(stepped), ObservationEvent).image_id == image_id
    with pytest.raises(pydantic.ValidationError, match="image_id"):
        ObservationEvent.build(episode_id="ep", turn=1, action="exec", status=SandboxStatus.OK, image_id="rs-task/x:1")
