"""Explain's story (pure): stable sections, hidden verdict as statuses only, inputs the reward used, artifacts."""

from __future__ import annotations

from bus.scan import Record
from schemas.events import GenerationEvent, InputRef, RewardEvent
from streams.explain.locate import Found, Located
from streams.explain.story import build_story
from streams.reward.policy import default_policy_path
from tests.unit.reward_events import execution, ids, judgement, verdict, verified

SECTIONS = {"generation_id", "found", "generation", "execution", "verdict", "judgement", "reward", "math",
            "artifacts", "logs", "log_search_error", "scanned"}  # fmt: skip


def at(topic: str, offset: int) -> Record:
    return Record(topic, 1, offset, 1_700_000_000_000 + offset, b"g", b"{}")


def test_story_of_a_generation_with_a_retried_verdict() -> None:
    gen = GenerationEvent(**ids("g"), policy_version="step-1", code="def f():\n    return 1\n")
    ex = execution("g")
    old_verdict, new_verdict = verdict("g", status="sandbox_error", passed=0), verdict("g", passed=2, attempt=2)
    judge = judgement("g", 0.5)
    used = [InputRef(role="execution", event_id=ex.event_id), InputRef(role="verdict", event_id=new_verdict.event_id),
            InputRef(role="judgement", event_id=judge.event_id)]  # fmt: skip
    reward = RewardEvent(**ids("g"), reward=0.0, policy_name="default", policy_version="2", inputs=used, valid=True,
                         reasons=["public: all 2 cases passed", "hidden: 2/3 cases passed"])  # fmt: skip
    located = Located("g")
    located.events = {
        "generations": [Found(at("rs.generations", 5), gen)],
        "executions": [Found(at("rs.executions", 7), ex)],
        "verdicts": [Found(at("rs.verdicts", 8), new_verdict), Found(at("rs.verdicts", 9), old_verdict)],
        "judgements": [Found(at("rs.judgements", 6), judge)],
        "rewards": [Found(at("rs.rewards", 10), reward)],
    }
    story = build_story(located, [{"component": "verifier", "message": "m", "secret": "x"}], [default_policy_path()])
    assert set(story) == SECTIONS
    assert story["generation"]["code"] == gen.code
    assert story["generation"]["location"] == {"topic": "rs.generations", "partition": 1, "offset": 5,
                                               "timestamp_ms": 1_700_000_000_005}  # fmt: skip
    assert story["verdict"]["event_id"] == new_verdict.event_id  # the one the reward used, not the last seen
    assert story["verdict"]["attempts_seen"] == 2
    assert story["verdict"]["statuses"] == {"failed": 1, "passed": 2}
    assert story["verdict"]["cases"] == [{"case_id": f"h{i}", "status": s} for i, s in
                                         enumerate(("passed", "passed", "failed"))]  # fmt: skip
    assert story["math"]["matches"] is True
    assert story["math"]["reward"] == 0.0
    assert story["logs"][0]["component"] == "verifier"
    assert "secret" not in story["logs"][0]
    assert story["artifacts"] == {}  # none stored in these events


def test_story_when_only_the_generation_is_found() -> None:
    located = Located("g")
    located.events = {"generations": [Found(at("rs.generations", 5), GenerationEvent(**ids("g"), policy_version="1",
                                                                                        code="x = 1\n"))]}  # fmt: skip
    story = build_story(located, [], [], log_error="log search failed")
    assert set(story) == SECTIONS
    assert story["found"] is True
    assert [story[s] for s in ("execution", "verdict", "judgement", "reward", "math")] == [None] * 5
    assert story["log_search_error"] == "log search failed"


def test_story_of_an_image_tasks_reward_shows_its_verifier() -> None:
    gen = GenerationEvent(**ids("g"), policy_version="1", workspace_ref="s3://bucket/sha256/ab/" + "ab" * 32,
                          workspace_sha256="ab" * 32)  # fmt: skip
    got = verified("g", 0.5)
    reward = RewardEvent(**ids("g"), reward=0.5, policy_name="default", policy_version="2", valid=True,
                         inputs=[InputRef(role="verdict", event_id=got.event_id)])  # fmt: skip
    located = Located("g")
    located.events = {"generations": [Found(at("rs.generations", 5), gen)],
                      "verdicts": [Found(at("rs.verdicts", 8), got)],
                      "rewards": [Found(at("rs.rewards", 10), reward)]}  # fmt: skip
    story = build_story(located, [], [default_policy_path()])
    assert story["verdict"]["verifier"]["reward"] == 0.5
    assert story["verdict"]["verifier"]["source"] == "reward.txt"
    assert story["math"]["matches"] is True
