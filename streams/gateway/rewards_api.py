"""The rewards endpoints' bodies: ``POST /v1/rewards``, ``GET /v1/rewards/{id}`` and OpenRLHF's remote reward.

``/v1/rewards`` takes a batch of generations against registered tasks (``task_id`` + ``code``; the gateway
makes ``generation_id`` unless given) under one ``run_id``, publishes them to the generations topic as a
trainer's SDK would, and either waits for their rewards (``wait``: true, up to ``timeout_s``) or answers at
once with the ids to poll.

OpenRLHF (``--remote_rm_url http://HOST:8080/get_reward``) posts ``{"query": [...], "prompts": [...],
"labels": [...]}``, one entry per sample, and reads ``rewards`` (``scores`` too). A label names the task: the
task id itself (``"HumanEval/0"``), or a JSON object ``{"task_id": ..., "language": ...}``. The program is
the sample's completion: the query less its prompt (when the query starts with it), its first fenced code
block if it has one, else the completion itself (a HumanEval-style continuation of a prompt that defines the
function gets the prompt put back in front), exactly as the TRL and verl adapters read a completion.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from schemas.events import CODE_INLINE_MAX_CHARS, RewardEvent
from schemas.tasks import Language
from streams.sdk.adapters import extract_code

Id = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
TaskIdText = Annotated[str, StringConstraints(min_length=1, max_length=256)]
MetaKey = Annotated[str, StringConstraints(max_length=64)]
MetaValue = Annotated[str, StringConstraints(max_length=256)]
_TRAILING_SPECIAL = re.compile(r"(\s*(<\|[A-Za-z0-9_]{1,40}\|>|</s>|<eos>|<\|endoftext\|>))+\s*$")


class GenerationIn(BaseModel):
    """One generation to reward."""

    model_config = ConfigDict(extra="forbid")

    task_id: TaskIdText = Field(description="a registered task (`rewardstream tasks load`)")
    code: str = Field(max_length=CODE_INLINE_MAX_CHARS, description="the program")
    generation_id: Id | None = Field(None, description="unique id of this sample; default: one the gateway makes")
    language: Language = Field("python", description="language of the code")
    group_id: Id | None = Field(None, description="samples of one prompt (e.g. a GRPO group)")
    sample_index: int = Field(0, ge=0, le=1_000_000, description="index of this sample within its group")
    metadata: dict[
        Annotated[str, StringConstraints(max_length=64)], Annotated[str, StringConstraints(max_length=256)]
    ] = Field(default_factory=dict, max_length=32, description="tags copied to logs for search")


class RewardsRequest(BaseModel):
    """``POST /v1/rewards``."""

    model_config = ConfigDict(extra="forbid")

    run_id: Id = Field("gateway", description="the training run these generations belong to")
    policy_version: Annotated[str, StringConstraints(min_length=1, max_length=256)] = Field(
        "0", description="checkpoint/step of the policy that wrote the code"
    )
    generations: list[GenerationIn] = Field(min_length=1, description="the batch (at most RS_GATEWAY_MAX_BATCH)")
    wait: bool = Field(True, description="wait for the rewards; false: answer at once with ids to poll")
    timeout_s: float | None = Field(
        None, gt=0, le=3600, description="longest wait (wait=true); default and cap: RS_GATEWAY_REWARD_WAIT_S"
    )


class RewardOut(BaseModel):
    """One generation's reward, or that it is still pending."""

    generation_id: str
    status: Literal["rewarded", "pending"]
    task_id: str | None = None
    reward: float | None = None
    reasons: list[str] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    components: dict[str, float] = Field(default_factory=dict)
    policy_name: str | None = None
    policy_version: str | None = None
    valid: bool | None = Field(None, description="fit for training (RewardEvent 1.1); None while pending or on 1.0")
    canary: bool | None = Field(
        None, description="the task is a canary: any reward above 0 is a detected hack; None while pending"
    )
    invalid_reason: str | None = Field(None, description="why valid is false (canary, sandbox_error, missing_signals)")
    poll: str | None = Field(None, description="where to poll while pending")

    @classmethod
    def of(cls, event: RewardEvent) -> RewardOut:
        return cls(
            generation_id=event.generation_id, status="rewarded", task_id=event.task_id, reward=event.reward,
            reasons=list(event.reasons), flags=list(event.flags), missing=list(event.missing),
            components=dict(event.components), policy_name=event.policy_name, policy_version=event.policy_version,
            valid=event.valid, canary=event.canary, invalid_reason=event.invalid_reason,
        )  # fmt: skip

    @classmethod
    def pending(cls, generation_id: str) -> RewardOut:
        return cls(generation_id=generation_id, status="pending", poll=f"/v1/rewards/{generation_id}")


class RewardsResponse(BaseModel):
    """The batch's rewards in input order; ``complete`` is false when some were still pending at the deadline."""

    run_id: str
    complete: bool
    rewards: list[RewardOut]


class OpenRlhfRequest(BaseModel):
    """OpenRLHF's remote reward request: one query (prompt + response) per sample, with its prompt and label."""

    model_config = ConfigDict(extra="ignore")

    query: list[str] = Field(min_length=1, description="prompt + response per sample, as OpenRLHF sends it")
    prompts: list[str] | None = Field(None, description="the prompt of each sample (stripped from its query)")
    labels: list[str] | None = Field(
        None, description='per sample: the task id, or a JSON object {"task_id": ..., "language": ...}'
    )


class OpenRlhfResponse(BaseModel):
    """What OpenRLHF reads: ``rewards`` (and ``scores`` for dynamic filtering), one per query."""

    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]] = Field(default_factory=dict)


class LabelError(ValueError):
    """A label that names no task."""


def parse_label(label: str) -> tuple[str, str]:
    """(task id, language) of an OpenRLHF label: the task id, or ``{"task_id", "language"}`` as JSON."""
    text = label.strip()
    if text.startswith("{"):
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise LabelError(f"not JSON: {exc}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("task_id"), str) or not obj["task_id"]:
            raise LabelError('a JSON label needs "task_id" (a string)')
        language = obj.get("language", "python")
        if not isinstance(language, str):
            raise LabelError('"language" must be a string')
        return obj["task_id"], language
    if not text:
        raise LabelError("empty label: it must name a task")
    return text, "python"


def completion_code(query: str, prompt: str | None) -> str:
    """The program in one OpenRLHF sample (see the module docstring)."""
    completion = query[len(prompt) :] if prompt and query.startswith(prompt) else query
    completion = _TRAILING_SPECIAL.sub("", completion)
    return extract_code(completion, prompt)
