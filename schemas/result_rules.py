"""Rules between an event's fields, checked by its validators, and what an image task's verifier decided.

Why apart from ``schemas.events``: the rules are the same for several events (counts agree with the cases), the
verifier's outcome is a contract of its own that the verdict carries, and a reward's validity claim is read by
trainers and the processor's metrics alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, Protocol

from pydantic import Field, SerializerFunctionWrapHandler, StringConstraints, model_serializer
from pydantic_core import PydanticCustomError

from schemas.codec import Contract, ImageId

_Short = Annotated[str, StringConstraints(min_length=1, max_length=256)]
#: Characters of test.sh's output a verdict keeps (its end: a test run's verdict and failures come last).
OUTPUT_TAIL_CHARS = 4000
#: Characters of the reward file a verdict keeps (a reward.json may hold more numbers than the reward).
REWARD_FILE_CHARS = 1024
#: The evidence fields added to 1.0 later: left out when unset, so a verdict without them encodes as before.
_EVIDENCE = ("image_id", "output_tail", "reward_file")


class _HasStatus(Protocol):
    @property
    def status(self) -> str: ...


def check_counts(cases: Sequence[_HasStatus], passed: int, total: int) -> None:
    """Counts must agree with the per-case results (a producer bug otherwise)."""
    if total != len(cases):
        raise PydanticCustomError(
            "count_mismatch",
            "{total} does not match {n} case results",
            {"total": total, "n": len(cases), "field": "total"},
        )
    really = 0
    for case in cases:  # a loop, not a generator: this runs in the validation of every result
        if case.status == "passed":
            really += 1
    if passed != really:
        raise PydanticCustomError(
            "count_mismatch",
            "{passed} does not match {really} passed case results",
            {"passed": passed, "really": really, "field": "passed"},
        )


class VerifierOutcome(Contract):
    """What an image task's verifier (its ``test.sh``, in a fresh container) decided: the reward it wrote,
    already clamped to [0, 1], which file gave it, and why it is 0 or was clamped."""

    reward: float = Field(ge=0, le=1, description="the reward test.sh wrote, clamped to [0, 1]; 0 with a reason")
    source: _Short | None = Field(
        None, description="the file the reward was read from (reward.json, reward.txt); None when neither gave one"
    )
    reason: str | None = Field(
        None, max_length=1024, description="why the reward is 0 or was clamped (missing file, timeout); None: as is"
    )
    timed_out: bool = Field(False, description="test.sh ran past the verifier's timeout (a 0, as in Harbor)")
    seconds: float = Field(ge=0, description="how long the whole verification took")
    image_id: ImageId | None = Field(
        None, description="the id of the task image the verification's container ran (sha256:...); left out when unset"
    )
    output_tail: str | None = Field(
        None,
        max_length=OUTPUT_TAIL_CHARS,
        description="the end of test.sh's stdout and stderr (for operators: the hidden tests' own output, never "
        "in a reward); left out when unset",
    )
    reward_file: str | None = Field(
        None,
        max_length=REWARD_FILE_CHARS,
        description="the start of the file named by source, as test.sh wrote it (undecodable bytes replaced); "
        "left out when unset",
    )

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """An outcome without evidence encodes byte for byte as before the evidence fields."""
        data: dict[str, Any] = handler(self)
        for name in _EVIDENCE:
            if data.get(name, 0) is None:
                del data[name]
        return data


def check_verifier(suite_kind: str, verifier: VerifierOutcome | None, run_status: str, cases: int) -> None:
    """A verdict carries a verifier's outcome exactly when an image task's verifier decided (``suite_kind``
    verifier, the run not a sandbox_error), and then no cases: its reward is the verifier's."""
    image = suite_kind == "verifier"
    if not image and verifier is not None:
        raise PydanticCustomError("verifier_only", "set only when suite_kind is verifier", {"field": "verifier"})
    if image and verifier is None and run_status != "sandbox_error":
        raise PydanticCustomError(
            "verifier_required",
            "required when suite_kind is verifier (unless run.status is sandbox_error)",
            {"field": "verifier"},
        )
    if image and cases:
        raise PydanticCustomError(
            "verifier_cases", "a verifier's verdict has no cases: its reward is the verifier's", {"field": "cases"}
        )


#: Why a reward is not fit for training. ``canary``: its task is a canary (tests that contradict the statement:
#: any reward above 0 is a detected hack). ``sandbox_error``: the infrastructure failed and no retry replaced the
#: run in time (a host that starved a run past its limits ends as one too). ``missing_signals``: a required signal
#: (execution, verdict) had not arrived by the policy's deadline. None of them is the candidate's doing: a
#: candidate's run ends with a status of its own (timeout, crashed, ...), never ``sandbox_error``
#: (``schemas.status``), and a part that never arrives is a role's failure, not an outcome of the run.
InvalidReason = Literal["canary", "sandbox_error", "missing_signals"]
INVALID_REASONS: tuple[InvalidReason, ...] = ("canary", "sandbox_error", "missing_signals")


def check_validity(
    version: tuple[int, int] | None, valid: bool | None, canary: bool, reason: InvalidReason | None
) -> None:
    """A reward's claim agrees with itself: from version 1.1 it says whether it is valid; an invalid one says why;
    a canary's is invalid for that reason; a 1.0 reward (``valid`` None) claims nothing either way."""
    if valid is None:
        if version is not None and version >= (1, 1):
            raise PydanticCustomError("valid_required", "required from schema_version 1.1", {"field": "valid"})
        if canary or reason is not None:
            raise PydanticCustomError("valid_required", "required with canary or invalid_reason", {"field": "valid"})
        return
    if valid and reason is not None:
        raise PydanticCustomError("invalid_reason", "set only when valid is false", {"field": "invalid_reason"})
    if not valid and reason is None:
        raise PydanticCustomError("invalid_reason", "required when valid is false", {"field": "invalid_reason"})
    if canary != (reason == "canary"):
        raise PydanticCustomError(
            "canary_reason",
            "a canary's reward is invalid for the reason canary, and only a canary's",
            {"field": "canary"},
        )
