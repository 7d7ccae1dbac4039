"""An episode's transcript (pure): one line per answered action in the state row, the last ``MAX_STEPS`` kept,
stored as a JSON document the judge reads back; never the agent's output."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from schemas.episodes import ActionEvent, ObservationEvent
from schemas.status import SandboxStatus
from workers.episodes.transcript import DETAIL_MAX_CHARS, MAX_STEPS, document, noted, steps_of
from workers.episodes.turns import EpisodeState
from workers.judge.base import JudgeRequest, TranscriptStep

STATE = EpisodeState("ep-1", "swe/calc-1", 0, "a" * 64, 1000.0, 1000.0)


def _event(turn: int, **action: Any) -> ActionEvent:
    return ActionEvent.model_validate({"episode_id": "ep-1", "turn": turn, "action": action})


def _obs(turn: int, action: str, status: str = "ok", **more: Any) -> ObservationEvent:
    return ObservationEvent.build(episode_id="ep-1", turn=turn, action=action, status=status, **more)  # type: ignore[arg-type]


def test_each_answered_action_is_one_line_of_what_it_named_and_how_it_ended() -> None:
    state = noted(STATE, _event(0, action="open", task_id="swe/calc-1"), _obs(0, "open"))
    state = noted(state, _event(1, action="read", path="calc/ops.py"), _obs(1, "read", content="SECRET-CONTENT"))
    state = noted(state, _event(2, action="exec", command=["python", "-m", "pytest", "-q"]),
                  _obs(2, "exec", "nonzero_exit", exit_code=1, stdout="SECRET-OUT"))  # fmt: skip
    state = noted(state, _event(3, action="write", path="calc/ops.py", text="é\n"), _obs(3, "write"))
    state = noted(state, _event(4, action="write", path="../x", text="x"), _obs(4, "write", "rejected", reason="no"))
    state = noted(state, _event(5, action="submit"), _obs(5, "submit", ended="submitted"))
    steps, omitted = steps_of(document(state))
    assert omitted == 0
    assert [s.line() for s in steps] == [
        "turn 0 open swe/calc-1: ok",
        "turn 1 read calc/ops.py: ok",
        "turn 2 exec python -m pytest -q: nonzero_exit (exit 1)",
        "turn 3 write calc/ops.py (3 bytes): ok",
        "turn 4 write ../x (1 bytes): rejected",
        "turn 5 submit: ok",
    ]
    assert b"SECRET" not in document(state)  # output and content never enter it


def test_a_long_episode_keeps_its_last_steps_and_counts_the_rest() -> None:
    state = STATE
    for turn in range(1, MAX_STEPS + 21):
        state = noted(state, _event(turn, action="exec", command="x" * 500), _obs(turn, "exec", exit_code=0))
    assert len(state.transcript) == MAX_STEPS
    assert state.transcript_omitted == 20
    steps, omitted = steps_of(document(state))
    assert (steps[0].turn, steps[-1].turn, omitted) == (21, MAX_STEPS + 20, 20)
    assert len(steps[0].detail) == DETAIL_MAX_CHARS
    request = JudgeRequest("t", "p", "f", "code", steps, omitted)
    assert request.transcript_text().startswith("(20 earlier steps not shown)\nturn 21 exec ")


def test_the_worker_ending_an_episode_is_a_line_too() -> None:
    timed_out = ObservationEvent.build(episode_id="ep-1", turn=3, action=None, status=SandboxStatus.TIMEOUT,
                                       reason="the episode's time is up", ended="episode_timeout")  # fmt: skip
    steps, _ = steps_of(document(noted(STATE, None, timed_out)))
    assert [s.line() for s in steps] == ["turn 3 end the episode's time is up: timeout"]


@pytest.mark.parametrize(
    "data",
    [b"", b"[]", b"{}", orjson.dumps({"schema": "other", "steps": []}),
     orjson.dumps({"schema": "rewardstream.transcript/v1", "steps": [{"turn": "1"}]}),
     orjson.dumps({"schema": "rewardstream.transcript/v1", "steps": [1]}), b"x" * (300 << 10)],
)  # fmt: skip
def test_anything_else_is_not_a_transcript(data: bytes) -> None:
    with pytest.raises(ValueError, match=r"."):
        steps_of(data)


def test_a_request_with_a_transcript_is_cached_apart_from_the_same_code_without() -> None:
    plain = JudgeRequest("t", "p", "f", "code")
    with_steps = JudgeRequest("t", "p", "f", "code", (TranscriptStep(1, "exec", "true", "ok", 0),))
    assert plain.digest == plain.code_sha256
    assert with_steps.digest != plain.digest
    assert with_steps.code_sha256 == plain.code_sha256
