"""What every record about one generation copies from it: its ids (and turn).

Why apart from ``schemas.events``: results, join states, rewards and log records all carry them; one
definition keeps them equal, and the events module stays one contract per class.
"""

from __future__ import annotations

from typing import Protocol, TypedDict


class AboutGeneration(Protocol):
    """Anything about one generation: its events, and the reward processor's join state."""

    @property
    def generation_id(self) -> str: ...
    @property
    def episode_id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def task_id(self) -> str: ...
    @property
    def turn(self) -> int: ...


class GenerationIds(TypedDict):
    """The ids a log record about a generation carries."""

    generation_id: str
    episode_id: str
    run_id: str
    task_id: str


class ResultIds(GenerationIds):
    """The ids (and turn) a result, a join state or a reward copies from the generation it is about."""

    turn: int


def generation_ids(about: AboutGeneration) -> GenerationIds:
    """The generation's ids, as every record about it carries them (``LogRecord(**generation_ids(event))``)."""
    return {
        "generation_id": about.generation_id,
        "episode_id": about.episode_id,
        "run_id": about.run_id,
        "task_id": about.task_id,
    }


def result_ids(about: AboutGeneration) -> ResultIds:
    """The ids and turn an event derived from ``about`` carries (``ExecutionResult(**result_ids(event), ...)``):
    a result of a generation, the join state of its results, its reward."""
    return {**generation_ids(about), "turn": about.turn}
