"""The whole story of one generation as one JSON-able dict with a stable shape (pure).

Hidden tests never appear: a hidden verdict is shown as counts, per-case statuses and static flags only.
Every event section says which task version it names (``task_version``: the generation's pin, the version
each role graded against, the reward's; null when unset), so a reward can be traced to the task it measured.
Artifacts are links (``s3://``), never their content. Every section is present; ``null`` when not found.
A generation that came from an agent episode has one more section, ``episode`` (``streams.explain.steps``);
a one-shot generation's story is exactly as it was without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from schemas.events import Event, ExecutionResult, GenerationEvent, HiddenVerdict, JudgeScore, RewardEvent
from streams.explain.locate import Found, Located
from streams.explain.math import explain_reward, find_policy
from streams.reward.policy import Signals

#: Log record fields shown per line.
LOG_FIELDS = ("created_at", "level", "component", "worker", "message", "topic", "partition", "offset", "fields")


def _artifacts(event: Event) -> dict[str, str]:
    # ExecutionResult/HiddenVerdict gain ``artifacts`` (name -> s3:// URL); older events have none.
    value = getattr(event, "artifacts", None)
    return dict(sorted(value.items())) if isinstance(value, dict) else {}


def _chosen(found: list[Found], wanted: set[str]) -> Found | None:
    """The event the reward used (its input ids), else the latest one (highest attempt / offset)."""
    for item in found:
        if item.event.event_id in wanted:
            return item
    return found[-1] if found else None


def _pick(event: object, *names: str) -> dict[str, Any]:
    """The named attributes of an event, by name (the story's sections keep the events' own field names)."""
    return {name: getattr(event, name) for name in names}


def _generation(found: Found) -> dict[str, Any]:
    event = found.event
    assert isinstance(event, GenerationEvent)  # noqa: S101 - located by role
    fields = ("event_id", "run_id", "episode_id", "task_id", "task_version", "turn", "sample_index", "group_id",
              "policy_version")  # fmt: skip
    return {
        **_pick(event, *fields, "language"),
        "created_at": event.created_at.isoformat(),
        "code": event.code,
        "code_chars": None if event.code is None else len(event.code),
        **_pick(event, "code_ref", "code_sha256"),
        "metadata": dict(sorted(event.metadata.items())),
        "location": found.location(),
    }


def _execution(found: Found, attempts: int) -> dict[str, Any]:
    event = found.event
    assert isinstance(event, ExecutionResult)  # noqa: S101 - located by role
    return {
        **_pick(event, "event_id", "attempt"),
        "attempts_seen": attempts,
        **_pick(event, "worker", "task_version", "suite_kind"),
        "sandbox": event.run.model_dump(mode="json"),
        **_pick(event, "passed", "total"),
        "cases": [c.model_dump(mode="json") for c in event.cases],
        **_pick(event, "feedback", "stdout", "stderr"),
        "artifacts": _artifacts(event),
        "location": found.location(),
    }


def _verdict(found: Found, attempts: int) -> dict[str, Any]:
    event = found.event
    assert isinstance(event, HiddenVerdict)  # noqa: S101 - located by role
    return {
        **_pick(event, "event_id", "attempt"),
        "attempts_seen": attempts,
        **_pick(event, "worker", "grader_version", "task_version", "suite_kind"),
        "sandbox": event.run.model_dump(mode="json"),
        **_pick(event, "passed", "total"),
        "statuses": {status: sum(1 for c in event.cases if c.status == status) for status in _statuses(event)},
        "cases": [{"case_id": c.case_id, "status": c.status} for c in event.cases],
        "static_flags": [f.model_dump(mode="json") for f in event.static_flags],
        "static_flag_counts": dict(event.static_flag_counts),
        **({} if event.verifier is None else {"verifier": event.verifier.model_dump(mode="json")}),  # image tasks
        "artifacts": _artifacts(event),
        "location": found.location(),
    }


def _statuses(event: HiddenVerdict) -> list[str]:
    return sorted({c.status for c in event.cases})


def _judgement(found: Found) -> dict[str, Any]:
    event = found.event
    assert isinstance(event, JudgeScore)  # noqa: S101 - located by role
    fields = ("event_id", "task_version", "status", "score", "judge_model", "prompt_version", "rationale", "error",
              "latency_ms")  # fmt: skip
    return {**_pick(event, *fields), "location": found.location()}


def _reward(found: Found, count: int) -> dict[str, Any]:
    event = found.event
    assert isinstance(event, RewardEvent)  # noqa: S101 - located by role
    return {
        "event_id": event.event_id,
        "reward": event.reward,
        "policy_name": event.policy_name,
        "policy_version": event.policy_version,
        "task_version": event.task_version,
        "components": dict(sorted(event.components.items())),
        "reasons": list(event.reasons),
        "flags": list(event.flags),
        "missing": list(event.missing),
        "valid": event.valid,
        "canary": event.canary,
        "invalid_reason": event.invalid_reason,
        "inputs": [i.model_dump(mode="json") for i in event.inputs],
        "rewards_seen": count,
        "location": found.location(),
    }


def _math(reward: RewardEvent | None, signals: Signals, policies: list[Path]) -> dict[str, Any] | None:
    if reward is None:
        return None
    policy = find_policy(reward.policy_name, reward.policy_version, policies)
    if policy is None:
        return {
            "policy": f"{reward.policy_name} v{reward.policy_version}",
            "available": False,
            "steps": [
                f"policy {reward.policy_name} v{reward.policy_version} not found among the packaged policies "
                "and --policy files: pass its file with --policy to see the math"
            ],
        }
    return explain_reward(policy, signals, reward)


def build_story(
    located: Located,
    logs: list[dict[str, Any]],
    policies: list[Path],
    log_error: str | None = None,
    episode: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every section of the story; ``policies`` are the files a reward's policy is looked up in; ``episode``
    is the episode section (``steps.episode_section``) of a generation that came from one."""
    generation = located.generation()
    rewards = located.of("rewards")
    reward_found = rewards[0] if rewards else None
    reward = reward_found.event if reward_found is not None else None
    assert reward is None or isinstance(reward, RewardEvent)  # noqa: S101 - located by role
    wanted = {i.event_id for i in reward.inputs} if reward is not None else set()
    execution = _chosen(located.of("executions"), wanted)
    verdict = _chosen(located.of("verdicts"), wanted)
    judgement = _chosen(located.of("judgements"), wanted)
    signals = Signals(
        execution=execution.event if execution is not None else None,  # type: ignore[arg-type]
        verdict=verdict.event if verdict is not None else None,  # type: ignore[arg-type]
        judgement=judgement.event if judgement is not None else None,  # type: ignore[arg-type]
    )
    artifacts: dict[str, str] = {}
    if generation is not None and isinstance(generation.event, GenerationEvent) and generation.event.code_ref:
        artifacts["generation.code"] = generation.event.code_ref
    if generation is not None and isinstance(generation.event, GenerationEvent) and generation.event.workspace_ref:
        artifacts["generation.workspace"] = generation.event.workspace_ref
    for role, item in (("execution", execution), ("verdict", verdict)):
        if item is not None:
            artifacts.update({f"{role}.{name}": url for name, url in _artifacts(item.event).items()})
    story = {
        "generation_id": located.generation_id,
        "found": generation is not None,
        "generation": _generation(generation) if generation is not None else None,
        "execution": _execution(execution, len(located.of("executions"))) if execution is not None else None,
        "verdict": _verdict(verdict, len(located.of("verdicts"))) if verdict is not None else None,
        "judgement": _judgement(judgement) if judgement is not None else None,
        "reward": _reward(reward_found, len(rewards)) if reward_found is not None else None,
        "math": _math(reward, signals, policies),
        "artifacts": artifacts,
        "logs": [{k: line.get(k) for k in LOG_FIELDS} for line in logs],
        "log_search_error": log_error,
        "scanned": [s.as_json() for s in located.scanned],
    }
    return story if episode is None else {**story, "episode": episode}
