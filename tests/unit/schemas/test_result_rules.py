"""A verdict carries a verifier's outcome exactly when an image task's verifier decided, and a test suite's verdict
encodes as before image tasks."""

from __future__ import annotations

import pydantic
import pytest

from schemas.codec import decode, encode
from schemas.events import HiddenVerdict
from schemas.result_rules import VerifierOutcome
from tests.unit.reward_events import verdict, verified


def test_a_suites_verdict_encodes_without_the_verifier_field() -> None:
    assert b'"verifier"' not in encode(verdict("g"))


def test_an_image_tasks_verdict_round_trips_its_outcome() -> None:
    sent = verified("g", 0.5, reason="reward.txt holds 1.5, clamped to 1.0")
    got = decode(encode(sent), HiddenVerdict)
    assert got.verifier == sent.verifier
    assert (got.suite_kind, got.total) == ("verifier", 0)


def test_a_sandbox_error_needs_no_outcome_and_a_decision_does() -> None:
    assert verified("g", None, status="sandbox_error").verifier is None
    with pytest.raises(pydantic.ValidationError, match="required when suite_kind is verifier"):
        verified("g", None)


def test_a_suites_verdict_carries_no_outcome() -> None:
    data = {**verdict("g").model_dump(), "verifier": {"reward": 1.0, "seconds": 1.0}}
    with pytest.raises(pydantic.ValidationError, match="set only when suite_kind is verifier"):
        HiddenVerdict.model_validate(data)


def test_a_reward_outside_zero_one_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError):
        VerifierOutcome(reward=1.5, seconds=0.0)
