"""The Harbor tasks the repo ships (``rewardstream tasks examples``): small buggy projects, each a git repository
whose fix is on another branch (gone from the image: only HEAD's history is kept), graded passed/total by tests
that run the agent's code as ``nobody`` and never in the root test process."""

from __future__ import annotations

from pathlib import Path

from workers.tasks.harbor.examples import csv_stats, intervals, lru_cache, rle_c, roman, tokenizer
from workers.tasks.harbor.examples.spec import ExampleTask, write_task

EXAMPLES: tuple[ExampleTask, ...] = (
    intervals.SPEC,
    roman.SPEC,
    csv_stats.SPEC,
    tokenizer.SPEC,
    lru_cache.SPEC,
    rle_c.SPEC,
)


def example(name: str) -> ExampleTask:
    """The shipped task called ``name``; KeyError names the known ones."""
    for spec in EXAMPLES:
        if spec.name == name:
            return spec
    raise KeyError(f"no shipped task {name!r}; known: {', '.join(spec.name for spec in EXAMPLES)}")


def write_tasks(dest: Path) -> list[Path]:
    """Write every shipped task as a Harbor task directory under ``dest`` (created); their paths."""
    dest.mkdir(parents=True, exist_ok=True)
    return [write_task(spec, dest) for spec in EXAMPLES]
