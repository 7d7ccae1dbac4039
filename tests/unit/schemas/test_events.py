"""A reward's validity claim on the wire (``RewardEvent`` 1.1): always there from 1.1, never on a 1.0 reward."""

from __future__ import annotations

from typing import Any, ClassVar

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from schemas.codec import DecodeError, SchemaVersion1, decode, encode
from schemas.events import HiddenVerdict, RewardEvent
from schemas.result_rules import INVALID_REASONS
from tests.unit.reward_events import verdict
from tests.unit.schemas.strategies import reward_events

#: A reward as the processor wrote it before 1.1 (the field order of the model; no claim).
LEGACY = (
    b'{"schema_version":"1.0","event_id":"e1","created_at":"2026-01-01T00:00:00Z","generation_id":"g",'
    b'"episode_id":"g","run_id":"r","task_id":"HumanEval/0","turn":0,"reward":1.0,"policy_name":"default",'
    b'"policy_version":"2","components":{},"reasons":[],"flags":[],"missing":[],"inputs":[]}'
)


def test_a_legacy_reward_decodes_without_a_claim_and_encodes_as_written() -> None:
    reward = decode(LEGACY, RewardEvent)
    assert (reward.valid, reward.canary, reward.invalid_reason) == (None, False, None)
    assert encode(reward) == LEGACY


def test_a_new_reward_always_carries_the_claim() -> None:
    reward = RewardEvent(
        generation_id="g", episode_id="g", run_id="r", task_id="T/0", reward=0.0, policy_name="p",
        policy_version="1", valid=True,
    )  # fmt: skip
    data = orjson.loads(encode(reward))
    assert data["schema_version"] == "1.1"
    assert (data["valid"], data["canary"], data["invalid_reason"]) == (True, False, None)


@pytest.mark.parametrize(
    ("claim", "field"),
    [
        ({}, "valid"),  # 1.1 without a claim
        ({"valid": False}, "invalid_reason"),
        ({"valid": True, "invalid_reason": "sandbox_error"}, "invalid_reason"),
        ({"valid": False, "canary": True, "invalid_reason": "sandbox_error"}, "canary"),
        ({"valid": False, "invalid_reason": "canary"}, "canary"),
        ({"valid": True, "canary": True}, "canary"),
    ],
)
def test_a_claim_that_contradicts_itself_is_refused_naming_the_field(claim: dict[str, Any], field: str) -> None:
    data = {**orjson.loads(LEGACY), "schema_version": "1.1", **claim}
    with pytest.raises(DecodeError) as info:
        decode(orjson.dumps(data), RewardEvent)
    assert info.value.problems[0][0] == field


def test_a_legacy_reward_cannot_claim_canary_alone() -> None:
    with pytest.raises(DecodeError):
        decode(orjson.dumps({**orjson.loads(LEGACY), "canary": True}), RewardEvent)


@given(
    version=st.sampled_from(["1.0", "1.1", "1.7"]),
    valid=st.none() | st.booleans(),
    canary=st.none() | st.booleans(),
    reason=st.none() | st.sampled_from([*INVALID_REASONS, "candidate"]),
)
def test_any_claim_decodes_consistently_or_names_its_problem(
    version: str, valid: bool | None, canary: bool | None, reason: str | None
) -> None:
    data = {**orjson.loads(LEGACY), "schema_version": version}
    for name, given_value in (("valid", valid), ("canary", canary), ("invalid_reason", reason)):
        if given_value is not None:
            data[name] = given_value
    try:
        reward = decode(orjson.dumps(data), RewardEvent)
    except DecodeError as exc:
        problems = exc.problems
    else:
        problems = ()
    if problems:
        assert all(path for path, _ in problems)  # each names its field
        return
    assert reward.valid is not None or version == "1.0"
    assert reward.canary == (reward.invalid_reason == "canary")
    assert (reward.valid is False) == (reward.invalid_reason is not None)
    assert decode(encode(reward), RewardEvent) == reward


def test_a_verdict_says_canary_only_when_it_is_one() -> None:
    plain = verdict("g")
    assert b'"canary"' not in encode(plain)  # encodes as before canaries
    marked = verdict("g", canary=True)
    assert decode(encode(marked), HiddenVerdict).canary is True


@settings(max_examples=400, deadline=None)
@given(reward=reward_events())
def test_a_reward_encodes_as_its_model_serializer_writes_it(reward: RewardEvent) -> None:
    """``encode`` skips RewardEvent's wrap serializer for a reward with a claim (``wire_serializer``): the bytes
    must be the ones the model's own serializer writes, for 1.0 rewards (which keep it) and claimed ones."""
    assert encode(reward) == reward.__pydantic_serializer__.to_json(reward, by_alias=True)


class _NextMinorReward(RewardEvent):
    """A later minor version's reward: one field more (what a rolling upgrade's new processor writes)."""

    version: ClassVar[tuple[int, int]] = (1, 2)
    schema_version: SchemaVersion1 = Field("1.2", description="major.minor of this contract")
    trace_id: str | None = Field(None, description="a field the next minor adds")


def test_a_later_minors_claimed_reward_keeps_its_new_fields() -> None:
    """The claimed-reward serializer is each class's own: a subclass's fields are written, not the base's alone."""
    reward = _NextMinorReward(
        generation_id="g", episode_id="g", run_id="r", task_id="T/0", reward=1.0, policy_name="p",
        policy_version="1", valid=True, trace_id="t-1",
    )  # fmt: skip
    data = orjson.loads(encode(reward))
    assert (data["schema_version"], data["trace_id"]) == ("1.2", "t-1")
    assert encode(reward) == reward.__pydantic_serializer__.to_json(reward, by_alias=True)
    assert decode(encode(reward), RewardEvent).reward == 1.0  # an older reader ignores the newer minor's field
