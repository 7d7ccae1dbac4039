"""A decided reward is written without its pydantic model: its bytes must be the model's, byte for byte."""

from __future__ import annotations

from datetime import UTC, datetime

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.codec import EncodeError, decode, encode
from schemas.events import RewardEvent
from schemas.result_rules import InvalidReason
from schemas.signals import Signal
from streams.reward.decided import DecidedInput, DecidedReward

IDS = st.from_regex(r"\A[A-Za-z0-9_.:-]{1,40}\Z")
SIGNALS: st.SearchStrategy[Signal] = st.sampled_from(["execution", "verdict", "judgement"])
TEXT = st.text(max_size=60)
UNIT = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
#: Components are floats on the wire; a policy may compute one as an int (0, 1).
COMPONENT = st.one_of(UNIT, st.integers(min_value=0, max_value=1), st.floats(-1e6, 1e6, allow_nan=False))
CLAIMS: list[tuple[bool, bool, InvalidReason | None]] = [
    (True, False, None),
    (False, True, "canary"),
    (False, False, "sandbox_error"),
    (False, False, "missing_signals"),
]


@st.composite
def decided(draw: st.DrawFn, text: st.SearchStrategy[str] = TEXT) -> DecidedReward:
    valid, canary, why = draw(st.sampled_from(CLAIMS))
    stamp = draw(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)))
    return DecidedReward(
        event_id=draw(IDS), created_at=stamp, generation_id=draw(IDS), episode_id=draw(IDS), run_id=draw(IDS),
        task_id=draw(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.:/-]{0,40}\Z")),
        task_version=draw(st.one_of(st.none(), st.from_regex(r"\A[0-9a-f]{64}\Z"))),
        turn=draw(st.integers(0, 10_000)), reward=draw(UNIT), policy_name=draw(st.text(min_size=1, max_size=20)),
        policy_version=draw(st.text(min_size=1, max_size=20)),
        components=draw(st.dictionaries(st.text(max_size=20), COMPONENT, max_size=6)),
        reasons=draw(st.lists(text, max_size=8)), flags=draw(st.lists(st.text(max_size=20), max_size=8)),
        missing=draw(st.lists(SIGNALS, max_size=3, unique=True)),
        inputs=[DecidedInput(role, event_id) for role, event_id in draw(st.lists(st.tuples(SIGNALS, IDS), max_size=3))],
        valid=valid, canary=canary, invalid_reason=why,
    )  # fmt: skip


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(decided())
def test_a_decided_reward_encodes_as_its_model_does(reward: DecidedReward) -> None:
    wire = reward.encode()
    assert wire == encode(reward.event())
    assert decode(wire, RewardEvent) == reward.event()


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(decided(text=st.text(alphabet=st.characters(categories=["Cs"]), min_size=1, max_size=3)))
def test_text_orjson_refuses_fails_as_the_model_fails(reward: DecidedReward) -> None:
    """A lone surrogate (never in a reason this code writes: inputs are sanitized) goes through the model: the
    processor sees the model's error, not a new one."""
    if reward.reasons:
        with pytest.raises(pydantic.ValidationError):
            encode(reward.event())
        with pytest.raises(pydantic.ValidationError):
            reward.encode()


def test_a_reward_over_the_message_cap_is_refused_by_name() -> None:
    reward = DecidedReward(
        event_id="e", created_at=datetime.now(UTC), generation_id="g", episode_id="g", run_id="r", task_id="t",
        task_version=None, turn=0, reward=1.0, policy_name="p", policy_version="1",
        components={}, reasons=["x" * 1024] * 64, flags=["f" * (RewardEvent.max_bytes // 60)] * 64, missing=[],
        inputs=[], valid=True, canary=False, invalid_reason=None,
    )  # fmt: skip
    with pytest.raises(EncodeError, match=r"RewardEvent is \d+ bytes, over the"):
        reward.encode()


def test_a_claim_that_contradicts_itself_is_refused() -> None:
    with pytest.raises(ValueError, match="canary"):
        DecidedReward(
            event_id="e", created_at=datetime.now(UTC), generation_id="g", episode_id="g", run_id="r", task_id="t",
            task_version=None, turn=0, reward=1.0, policy_name="p", policy_version="1", components={}, reasons=[],
            flags=[], missing=[], inputs=[], valid=True, canary=True, invalid_reason=None,
        )  # fmt: skip
