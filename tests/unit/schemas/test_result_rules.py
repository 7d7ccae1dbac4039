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


IMAGE_ID = "sha256:" + "ab" * 32


def test_an_outcome_without_evidence_encodes_as_before_the_evidence_fields() -> None:
    data = encode(verified("g", 1.0))
    assert all(name not in data for name in (b'"image_id"', b'"output_tail"', b'"reward_file"')), data


def test_an_outcomes_evidence_round_trips() -> None:
    outcome = VerifierOutcome(reward=1.0, source="reward.txt", seconds=1.0, image_id=IMAGE_ID,
                              output_tail="1 passed\n", reward_file="1\n")  # fmt: skip
    sent = verified("g", 1.0).model_copy(update={"verifier": outcome})
    got = decode(encode(sent), HiddenVerdict)
    assert got.verifier == outcome
    assert (got.verifier.image_id, got.verifier.output_tail, got.verifier.reward_file) == (
        IMAGE_ID,
        "1 passed\n",
        "1\n",
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [("image_id", "rs-task/abc:1"), ("image_id", "sha256:AB"), ("output_tail", "x" * 4001),
     ("reward_file", "x" * 1025)],
)  # fmt: skip
def test_evidence_is_bounded_and_an_image_is_named_by_its_id(field: str, value: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=field):
        VerifierOutcome.model_validate({"reward": 1.0, "seconds": 1.0, field: value})
