"""The soak's exactly-once check, read from the topics themselves (committed records only), not from the SDK.

Why the topics: the SDK resolves one future per generation and would hide a second reward; a duplicate or a
lost answer is a fact about the topics. Every generation on the generations topic (the trainer's one-shot
ones and the episode worker's submits) must have exactly one reward, and every action on the actions topic
exactly one observation (same episode, same turn).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

from bus.scan import read_ranges, watermarks
from schemas.codec import DecodeError, decode
from schemas.episodes import ActionEvent, ObservationEvent
from schemas.events import GenerationEvent, RewardEvent
from schemas.settings import Settings
from schemas.topics import Role, catalog_for, topic_for

#: How many ids of each problem the verdict lists (the counts are complete).
SHOWN = 10
M = TypeVar("M", GenerationEvent, RewardEvent, ActionEvent, ObservationEvent)


def _events(settings: Settings, role: Role, model: type[M], undecodable: list[str]) -> Iterator[M]:
    topic = topic_for(role, catalog_for(settings)).name
    config = settings.kafka_client_config()
    for record in read_ranges(config, topic, watermarks(config, topic)):
        try:
            yield decode(record.value, model)
        except DecodeError as exc:
            undecodable.append(f"{topic}[{record.partition}]@{record.offset}: {exc}")


def _count(
    settings: Settings, role: Role, model: type[M], key: Callable[[M], Hashable], bad: list[str]
) -> Counter[Any]:
    return Counter(key(event) for event in _events(settings, role, model, bad))


def exactly_once(settings: Settings) -> dict[str, Any]:
    """Counts and the lost/duplicate answers of the run's topics; ``ok`` when there are none."""
    bad: list[str] = []
    generations = _count(settings, "generations", GenerationEvent, lambda e: e.generation_id, bad)
    rewards = _count(settings, "rewards", RewardEvent, lambda e: e.generation_id, bad)
    actions = _count(settings, "actions", ActionEvent, lambda e: (e.episode_id, e.turn), bad)
    observations = _count(settings, "observations", ObservationEvent, lambda e: (e.episode_id, e.turn), bad)
    lost_rewards = sorted(g for g in generations if g not in rewards)
    dup_rewards = sorted(g for g, n in rewards.items() if n > 1)
    stray_rewards = sorted(g for g in rewards if g not in generations)
    lost_obs = sorted(f"{e}#{t}" for e, t in actions if (e, t) not in observations)
    dup_obs = sorted(f"{e}#{t}" for (e, t), n in observations.items() if n > 1)
    problems = {
        "lost_rewards": lost_rewards,
        "duplicate_rewards": dup_rewards,
        "rewards_without_generation": stray_rewards,
        "lost_observations": lost_obs,
        "duplicate_observations": dup_obs,
        "undecodable": bad,
    }
    return {
        "generations": len(generations),
        "rewards": sum(rewards.values()),
        "actions": len(actions),
        "observations": sum(observations.values()),
        **{name: {"count": len(ids), "first": ids[:SHOWN]} for name, ids in problems.items()},
        "ok": not any(problems.values()),
    }
