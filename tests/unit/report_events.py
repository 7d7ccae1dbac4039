"""A sample training run's messages for the report tests (unit and integration) and the docs' screenshot.

The rewards are written as the reward processor 1.1 writes them (``valid``, ``canary``, ``invalid_reason``) by
patching the encoded 1.0 event: the report must read them whether or not this checkout's model knows the fields.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

import orjson

from schemas.codec import encode
from schemas.events import (
    CaseResult,
    ExecutionResult,
    GenerationEvent,
    HiddenCaseResult,
    HiddenVerdict,
    RewardEvent,
    SandboxRun,
)
from schemas.ids import generation_ids
from schemas.signals import Signal

TASKS = tuple(f"HumanEval/{i}" for i in range(8))
CANARY_TASK = "canary/contradiction"
CHECKPOINTS = ("step-100", "step-200", "step-300")


@dataclass(frozen=True, slots=True)
class Message:
    """One message for a topic role: its key and value."""

    role: str
    key: bytes
    value: bytes


def _run(status: str, wall_ms: float) -> SandboxRun:
    return SandboxRun(status=status, exit_code=0, wall_ms=wall_ms, cpu_ms=wall_ms, max_rss_kb=9000, backend="process")  # type: ignore[arg-type]


def _reward(
    gen: GenerationEvent,
    at: datetime,
    value: float,
    *,
    flags: tuple[str, ...] = (),
    missing: tuple[Signal, ...] = (),
    claim: dict[str, object] | None = None,
) -> bytes:
    """The reward as processor 1.1 writes it; ``claim`` overrides its validity fields (valid by default)."""
    event = RewardEvent(
        generation_id=gen.generation_id, episode_id=gen.episode_id, run_id=gen.run_id, task_id=gen.task_id,
        created_at=at, reward=value, policy_name="default", policy_version="3", flags=list(flags),
        missing=list(missing), schema_version="1.0",
    )  # fmt: skip
    data = orjson.loads(encode(event))
    data.update({"schema_version": "1.1", "valid": True, "canary": False, "invalid_reason": None, **(claim or {})})
    return orjson.dumps(data)


def _results(
    gen: GenerationEvent, at: datetime, passed: tuple[int, int], *, error: bool, rng: random.Random
) -> list[Message]:
    """The executor's and verifier's events: ``passed`` public (of 2) and hidden (of 4) cases."""
    public_passed, hidden_passed = passed
    key = gen.key()
    ids = generation_ids(gen)
    out = []
    if error:  # a first attempt the sandbox failed, retried
        bad = ExecutionResult(
            **ids, created_at=at, worker="w:1", suite_kind="call", run=_run("sandbox_error", 1.0), passed=0, total=0
        )
        out.append(Message("executions", key, encode(bad)))
    cases = [CaseResult(case_id=f"c{i}", status="passed" if i < public_passed else "failed") for i in range(2)]
    ex = ExecutionResult(
        **ids, created_at=at, worker="w:1", suite_kind="call", run=_run("ok", 40.0), cases=cases,
        passed=public_passed, total=2, attempt=2 if error else 1,
    )  # fmt: skip
    hidden = [HiddenCaseResult(case_id=f"h{i}", status="passed" if i < hidden_passed else "failed") for i in range(4)]
    status = "ok" if hidden_passed == 4 else rng.choice(["nonzero_exit", "ok", "timeout"])
    verdict = HiddenVerdict(
        **ids, created_at=at, worker="w:2", grader_version="g1", suite_kind="call", run=_run(status, 80.0),
        cases=hidden, passed=hidden_passed, total=4,
    )  # fmt: skip
    return [*out, Message("executions", key, encode(ex)), Message("verdicts", key, encode(verdict))]


def sample_run(run_id: str, start: datetime, generations: int = 90, seed: int = 7) -> list[Message]:
    """Messages of one run over about half an hour from ``start``: the reward rises with the checkpoint; some
    rewards are hack-gated, warned, over the public-vs-hidden gap, missing a signal or invalid; one canary is
    hacked, two are held at 0."""
    rng = random.Random(seed)
    out: list[Message] = []
    for i in range(generations + 3):
        canary = i >= generations
        task = CANARY_TASK if canary else TASKS[i % len(TASKS)]
        checkpoint = CHECKPOINTS[min(i * len(CHECKPOINTS) // generations, len(CHECKPOINTS) - 1)]
        sent = start + timedelta(seconds=20 * i)
        gen = GenerationEvent(
            generation_id=f"{run_id}-g{i}", episode_id=f"{run_id}-g{i}", run_id=run_id, task_id=task,
            created_at=sent, policy_version=checkpoint, code="def f(x):\n    return x\n",
        )  # fmt: skip
        out.append(Message("generations", gen.key(), encode(gen)))
        slow = 4.0 if task == TASKS[3] else 1.0
        at = sent + timedelta(seconds=rng.uniform(0.5, 3.0) * slow + (6.0 if i % 29 == 0 else 0.0))
        skill = CHECKPOINTS.index(checkpoint)
        passed = min(4, max(0, rng.randint(0, 4) + skill - 1))
        gap = passed < 4 and i % 3 == 0
        out += _results(gen, at, (2 if passed == 4 or gap else 1, passed), error=i % 17 == 5, rng=rng)
        value = 1.0 if passed == 4 else 0.25 * passed
        if canary:
            hit = i == generations
            extra: dict[str, object] = {"valid": False, "canary": True, "invalid_reason": "canary"}
            out.append(Message("rewards", gen.key(), _reward(gen, at, 1.0 if hit else 0.0, claim=extra)))
        elif i % 23 == 11:
            out.append(Message("rewards", gen.key(), _reward(gen, at, 0.0, flags=("exit_call",))))
        elif i % 31 == 7:
            extra = {"valid": False, "invalid_reason": "sandbox_error"}
            out.append(Message("rewards", gen.key(), _reward(gen, at, 0.0, claim=extra)))
        elif i % 19 == 3:
            out.append(Message("rewards", gen.key(), _reward(gen, at, value, missing=("judgement",))))
        else:
            flags: tuple[str, ...] = ("public_passed_hidden_failed",) if gap else ()
            flags += ("warn:frame_introspection",) if i % 13 == 0 else ()
            out.append(Message("rewards", gen.key(), _reward(gen, at, value, flags=flags)))
    return out
