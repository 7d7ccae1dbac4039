"""Deterministic explain stories (fixed ids and times) for the explain CLI's rendering tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bus.scan import Record
from schemas.events import Event, GenerationEvent, InputRef, RewardEvent
from streams.explain.locate import Found, Located
from streams.explain.story import build_story
from streams.reward.policy import default_policy_path
from tests.unit.reward_events import execution, ids, judgement, verdict

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def at(topic: str, offset: int) -> Record:
    return Record(topic, 1, offset, 1_700_000_000_000 + offset, b"g", b"{}")


def fixed(event: Event, event_id: str) -> Found:
    """``event`` with a fixed id and time, found at an offset of its topic (by role)."""
    topic = {"GenerationEvent": "generations", "ExecutionResult": "executions", "HiddenVerdict": "verdicts",
             "JudgeScore": "judgements", "RewardEvent": "rewards"}[type(event).__name__]  # fmt: skip
    offset = {"generations": 5, "executions": 7, "verdicts": 8, "judgements": 6, "rewards": 10}[topic]
    return Found(at(f"rs.{topic}", offset), event.model_copy(update={"event_id": event_id, "created_at": WHEN}))


def located(generation: GenerationEvent) -> Located:
    """Every event of ``generation`` (its id) graded: public 2/2, hidden 3/3, judge 0.8, reward 1.0."""
    gid = generation.generation_id
    ex, ver, judge = fixed(execution(gid), "ex1"), fixed(verdict(gid), "ver1"), fixed(judgement(gid), "jud1")
    used = [InputRef(role="execution", event_id="ex1"), InputRef(role="verdict", event_id="ver1"),
            InputRef(role="judgement", event_id="jud1")]  # fmt: skip
    reward = RewardEvent(**ids(gid), reward=1.0, policy_name="default", policy_version="2", inputs=used, valid=True,
                         reasons=["public: all 2 cases passed", "hidden: 3/3 cases passed"])  # fmt: skip
    found = Located(gid)
    found.events = {"generations": [fixed(generation, "gen1")], "executions": [ex], "verdicts": [ver],
                    "judgements": [judge], "rewards": [fixed(reward, "rew1")]}  # fmt: skip
    return found


def one_shot_story() -> dict[str, Any]:
    """A one-shot generation's whole story, with one log line."""
    gen = GenerationEvent(**ids("g"), policy_version="step-1", code="def f():\n    return 1\n")
    logs = [{"created_at": "2026-01-02T03:04:05.000000+00:00", "level": "info", "component": "verifier",
             "message": "graded"}]  # fmt: skip
    return build_story(located(gen), logs, [default_policy_path()])


def obs_record(offset: int, topic: str = "rs.observations") -> Record:
    return Record(topic, 1, offset, 1_700_000_000_000 + offset * 10, b"ep", b"{}")


def episode_generation(turn: int = 5) -> GenerationEvent:
    return GenerationEvent(generation_id="ep", episode_id="ep", run_id="run-1", task_id="swe/calc",
                           policy_version="p-7", turn=turn, workspace_ref="s3://bucket/sha256/ab/" + "ab" * 32,
                           workspace_sha256="ab" * 32)  # fmt: skip
