"""The mutant gate: does a task's hidden suite catch small bugs in its reference solution?

A mutant the hidden suite passes would earn reward 1.0 while being wrong. Some survivors are equivalent
programs (no test can tell), so one survivor is not a defect; a suite that kills *none* of the mutants gives the
reward no signal about correctness and is reported as a ``TaskWarning`` (``--strict`` refuses it). A mutant whose
run failed on the host (a ``sandbox_error``) counts neither way: the host is not the suite.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from schemas.tasks import Task
from workers.tasks.files import TaskWarning
from workers.tasks.mutants import Mutant, mutants

#: How the hidden suite judged one program: every case passed, one failed, or the host failed the run.
Judgement = Literal["passed", "failed", "host_error"]
#: Grades ``code`` on ``task``'s hidden suite alone (the suite that decides the reward).
HiddenJudge = Callable[[Task, str], Judgement]

_SURVIVORS_LISTED = 3


@dataclass(frozen=True, slots=True)
class MutantReport:
    """What the hidden suite of one task did to the mutants of its reference."""

    task_id: str
    mutants: int
    killed: int
    host_errors: int
    #: ``line N: change`` of each mutant the hidden suite passed.
    survivors: tuple[str, ...]

    @property
    def judged(self) -> int:
        """Mutants the suite decided on (those the host failed left out)."""
        return self.mutants - self.host_errors

    @property
    def score(self) -> float | None:
        """Killed / judged; None when nothing was judged."""
        return self.killed / self.judged if self.judged else None

    def warning(self) -> TaskWarning | None:
        """A warning when the hidden suite passed every mutant it judged."""
        if self.judged == 0 or self.killed > 0:
            return None
        shown = "; ".join(self.survivors[:_SURVIVORS_LISTED])
        more = f" (+{len(self.survivors) - _SURVIVORS_LISTED} more)" if len(self.survivors) > _SURVIVORS_LISTED else ""
        return TaskWarning(
            self.task_id,
            f"the hidden suite passed all {self.judged} mutants of the reference solution ({shown}{more}): it gives "
            "the reward no signal about correctness",
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "mutants": self.mutants,
            "killed": self.killed,
            "host_errors": self.host_errors,
            "score": self.score,
            "survivors": list(self.survivors),
        }


def check_tasks(
    pairs: Sequence[tuple[Task, str]], judge: HiddenJudge, limit: int, *, workers: int = 4
) -> list[MutantReport]:
    """``check_task`` for each (task, reference) pair, mutants judged in parallel threads; input order kept."""
    jobs = [(task, m) for task, code in pairs for m in _made(task, code, limit)]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        judged = list(pool.map(lambda job: judge(job[0], job[1].code), jobs))
    by_task: dict[str, tuple[list[Mutant], list[Judgement]]] = {t.task_id: ([], []) for t, _ in pairs}
    for (task, mutant), judgement in zip(jobs, judged, strict=True):
        made, results = by_task[task.task_id]
        made.append(mutant)
        results.append(judgement)
    return [_report(task.task_id, *by_task[task.task_id]) for task, _ in pairs]


def _made(task: Task, code: str, limit: int) -> list[Mutant]:
    return [] if task.entry_point is None else mutants(code, task.entry_point, limit)


def _report(task_id: str, made: Sequence[Mutant], judged: Sequence[Judgement]) -> MutantReport:
    survivors = tuple(f"line {m.line}: {m.change}" for m, j in zip(made, judged, strict=True) if j == "passed")
    return MutantReport(
        task_id,
        mutants=len(made),
        killed=sum(j == "failed" for j in judged),
        host_errors=sum(j == "host_error" for j in judged),
        survivors=survivors,
    )
