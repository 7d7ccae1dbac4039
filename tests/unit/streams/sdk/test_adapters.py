"""Adapter plumbing without Kafka: code extraction and the call shapes of TRL and verl."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.events import GenerationEvent, RewardEvent
from streams.sdk.adapters import TrlRewardFunction, VerlComputeScore, completion_text, extract_code
from streams.sdk.config import SdkError


class FakeClient:
    """Scores a program 1.0 when it contains 'return a + b'."""

    def __init__(self) -> None:
        self.sent: list[GenerationEvent] = []

    def generation(self, task_id: str, code: str, **fields: Any) -> GenerationEvent:
        return GenerationEvent(
            run_id="r",
            task_id=task_id,
            code=code,
            policy_version="p",
            episode_id=str(fields["generation_id"]),
            **fields,
        )

    def send(self, event: GenerationEvent) -> None:
        self.sent.append(event)

    def flush(self) -> None:
        pass

    def wait(self, ids: list[str], timeout_s: float) -> dict[str, RewardEvent]:
        out = {}
        for e in self.sent:
            value = 1.0 if "return a + b" in (e.code or "") else 0.0
            canary = e.task_id.startswith("canary/")
            claim: dict[str, Any] = {
                "valid": not canary,
                "canary": canary,
                "invalid_reason": "canary" if canary else None,
            }
            out[e.generation_id] = RewardEvent(
                generation_id=e.generation_id, episode_id=e.episode_id, run_id="r", task_id=e.task_id,
                reward=value, policy_name="d", policy_version="1", **claim,
            )  # fmt: skip
        return {i: out[i] for i in ids}


def test_extract_code_prefers_fences_and_completes_humaneval_bodies() -> None:
    assert extract_code("Here:\n```python\nx = 1\n```\nbye") == "x = 1\n"
    assert extract_code("    return a + b\n", "def add(a, b):\n") == "def add(a, b):\n    return a + b\n"
    assert extract_code("def add(a, b):\n    return a + b\n", "def add(a, b):\n").count("def") == 1
    assert completion_text([{"role": "assistant", "content": "hi"}]) == "hi"
    with pytest.raises(SdkError):
        completion_text(42)


def test_trl_shape_orders_rewards_and_needs_task_ids() -> None:
    client = FakeClient()
    trl = TrlRewardFunction(client)  # type: ignore[arg-type]
    got = trl(
        prompts=["def add(a, b):\n"] * 2, completions=["    return a + b\n", "    return 0\n"], task_id=["t", "t"]
    )
    assert got == [1.0, 0.0]
    assert trl.__name__ == "rewardstream"
    # a canary's reward is no training data: None, TRL's "no reward from this function for this sample"
    mixed = trl(prompts=["def add(a, b):\n"] * 2, completions=["    return a + b\n"] * 2, task_id=["t", "canary/x"])
    assert mixed == [1.0, None]
    with pytest.raises(SdkError, match="task_id"):
        trl(prompts=["p"], completions=["c"])


def test_verl_shape_takes_task_from_extra_info_or_ground_truth() -> None:
    client = FakeClient()
    score = VerlComputeScore(client)  # type: ignore[arg-type]
    assert score("humaneval", "def add(a, b):\n    return a + b\n", "HumanEval/1", None) == 1.0
    assert score("humaneval", "def add(a, b):\n    return a\n", "ignored", {"task_id": "HumanEval/2"}) == 0.0
    assert [e.task_id for e in client.sent] == ["HumanEval/1", "HumanEval/2"]
    assert client.sent[0].metadata == {"data_source": "humaneval"}
