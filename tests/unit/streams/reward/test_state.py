"""The join state as plain data: its stored form is the one the pydantic model wrote, and a part kept as its
input bytes is stored as them and restores to the same state."""

from __future__ import annotations

import orjson
import pytest

from schemas.codec import decode_verbatim, encode
from schemas.events import ExecutionResult, JudgeScore
from streams.reward.join import JoinState, absorb, emitted
from streams.reward.state import _Stored
from tests.unit.reward_events import execution, judgement, verdict

T0 = 1_000_000.25


def _reference(state: JoinState) -> bytes:
    """What the pydantic model this replaced wrote for ``state`` (``_Stored`` is its schema, field for field)."""
    return _Stored(**{name: getattr(state, name) for name in _Stored.model_fields}).model_dump_json().encode()


def _states() -> list[JoinState]:
    one = absorb(None, execution("g"), 3, T0).state
    two = absorb(one, verdict("g", flags=("exit_call",)), 3, T0 + 1).state
    three = absorb(two, judgement("g", score=0.4), 3, T0 + 2).state
    return [one, two, three, three.replace(withheld_reported=True), emitted(three, "r" * 32, None),
            emitted(three, "r" * 32, 17).replace(status="gave_up")]  # fmt: skip


@pytest.mark.parametrize("index", range(6))
def test_the_stored_form_is_the_models_byte_for_byte(index: int) -> None:
    state = _states()[index]
    assert state.dumps() == _reference(state)
    assert JoinState.loads(state.dumps()) == state


def test_a_part_kept_as_its_input_bytes_is_stored_as_them_and_restores_alike() -> None:
    """Input bytes are stored as they came (any spacing or key order a producer wrote), never re-serialised."""
    event = execution("g")
    spaced = orjson.dumps(dict(reversed(orjson.loads(encode(event)).items())), option=orjson.OPT_INDENT_2)
    decoded, verbatim = decode_verbatim(spaced, ExecutionResult)
    assert verbatim
    assert decoded == event
    state = absorb(None, decoded, 0, T0, spaced).state
    stored = state.dumps()
    assert spaced in stored
    assert JoinState.loads(stored) == state
    judged = judgement("g")
    later = absorb(state, judged, 0, T0 + 1, encode(judged)).state
    assert spaced in later.dumps()
    assert JoinState.loads(later.dumps()) == later


def test_a_part_replaced_without_bytes_drops_the_old_parts_bytes() -> None:
    first = execution("g", status="sandbox_error")
    state = absorb(None, first, 0, T0, encode(first)).state
    retried = absorb(state, execution("g", attempt=2), 0, T0 + 1).state
    assert retried.execution is not None
    assert retried.execution.attempt == 2
    assert retried.raw is None
    assert JoinState.loads(retried.dumps()) == retried


def test_a_newer_minors_part_is_not_kept_as_its_bytes() -> None:
    """Forgiven fields would be stored with it: such a part is serialised as this reader decoded it."""
    newer = orjson.loads(encode(judgement("g")))
    newer.update(schema_version="1.1", trace_id="t-1")
    decoded, verbatim = decode_verbatim(orjson.dumps(newer), JudgeScore)
    assert not verbatim
    assert decoded.event_id == newer["event_id"]
