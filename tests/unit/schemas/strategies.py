"""The building blocks of the codec's property tests: ids, times, numbers, JSON values, the event envelope,
rewards."""

from __future__ import annotations

import string
from datetime import UTC
from typing import Any

from hypothesis import strategies as st

from schemas.events import InputRef, RewardEvent

ID_CHARS = string.ascii_letters + string.digits + "_.:-"
ids = st.text(ID_CHARS, min_size=1, max_size=24)
task_ids = st.builds(
    lambda head, tail: head + tail,
    st.sampled_from(string.ascii_letters + string.digits),
    st.text(ID_CHARS + "/", max_size=20),
)
short = st.text(min_size=1, max_size=20)
finite = st.floats(allow_nan=False, allow_infinity=False)
nonneg = st.floats(min_value=0, max_value=1e12, allow_nan=False)
unit = st.floats(min_value=0, max_value=1)
when = st.datetimes(timezones=st.just(UTC))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | finite | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
envelope: dict[str, Any] = {"schema_version": st.sampled_from(["1.0", "1.3"]), "event_id": ids, "created_at": when}
event: dict[str, Any] = {**envelope, "generation_id": ids, "episode_id": ids, "run_id": ids, "task_id": task_ids}

#: A reward's validity claims, each consistent with itself (``schemas.result_rules.check_validity``).
_CLAIMS: list[dict[str, Any]] = [
    {"valid": True},
    {"valid": False, "invalid_reason": "sandbox_error"},
    {"valid": False, "invalid_reason": "missing_signals"},
    {"valid": False, "canary": True, "invalid_reason": "canary"},
]


def reward_events() -> st.SearchStrategy[RewardEvent]:
    """1.0 rewards (no claim) and 1.1-or-newer ones with every kind of claim."""
    fields: dict[str, Any] = dict(
        **event,
        turn=st.integers(0, 10_000),
        reward=unit,
        policy_name=short,
        policy_version=short,
        components=st.dictionaries(st.text(max_size=10), finite, max_size=4),
        reasons=st.lists(st.text(max_size=30), max_size=3),
        flags=st.lists(st.text(max_size=10), max_size=3),
        missing=st.lists(st.sampled_from(["execution", "verdict", "judgement"]), max_size=3, unique=True),
        inputs=st.lists(
            st.builds(
                InputRef, role=st.sampled_from(["generation", "execution", "verdict", "judgement"]), event_id=ids
            ),
            max_size=4,
        ),
    )
    legacy = st.builds(RewardEvent, **{**fields, "schema_version": st.just("1.0")})
    claimed = st.sampled_from(_CLAIMS).flatmap(
        lambda claim: st.builds(
            RewardEvent,
            **{**fields, "schema_version": st.sampled_from(["1.1", "1.3"])},
            **{k: st.just(v) for k, v in claim.items()},
        )
    )
    return legacy | claimed
