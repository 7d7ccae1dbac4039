"""The reward of a graded solution: the pipeline's reward policy applied to the grader's signals.

Why here: the grader (workers) computes no reward and may not import streams; this CLI-layer module turns a
``GradeResult`` into the events the reward processor joins and calls the same ``evaluate`` on them, so
``rewardstream grade`` and the pipeline can never disagree on a reward. ``Graded.to_json`` is the result
line contract of ``rewardstream grade``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, TypedDict

from schemas.caps import fit, fit_item
from schemas.events import (
    CaseResult,
    ExecutionResult,
    HiddenCaseResult,
    HiddenVerdict,
    RewardEvent,
    StaticFlag,
)
from schemas.tasks import Task, task_version
from streams.reward.policy import PUBLIC_PASSED_HIDDEN_FAILED, WARN_FLAG_PREFIX, Policy, Scored, Signals, evaluate
from workers.grading.grader import GRADER_VERSION, Grader, GradeResult
from workers.grading.static_analysis import rule_counts, shown_flags
from workers.roles.runs import no_run, sandbox_run


class _Ids(TypedDict):
    generation_id: str
    episode_id: str
    run_id: str
    task_id: str


#: The events are only evaluated, never published: fixed ids keep them valid whatever the caller's ids are.
_IDS: _Ids = {"generation_id": "grade", "episode_id": "grade", "run_id": "grade", "task_id": "grade"}
SANDBOX_ERROR_REASON = "sandbox_error: the infrastructure failed; this is not a verdict on the code"


@dataclass(frozen=True, slots=True)
class Graded:
    """A grade with its reward: ``flags`` are the hack rules that gated it, ``policy`` its (name, version),
    ``task_version`` the version of the task it was graded against (``schemas.tasks.task_version``)."""

    result: GradeResult
    reward: float
    flags: tuple[str, ...]
    reasons: tuple[str, ...]
    policy: tuple[str, str]
    task_version: str | None = None

    @property
    def status(self) -> str:
        """The grader's verdict: ``pass`` | ``fail`` | ``sandbox_error``."""
        return self.result.status

    def to_json(self) -> dict[str, Any]:
        """``{"generation_id", "task_id", "status", "public", "hidden", "flags", "reward", ...}``."""
        r, public = self.result, self.result.public
        return {
            "generation_id": r.generation_id,
            "task_id": r.task_id,
            "status": r.status,
            "public": {"passed": public.passed if public else 0, "total": public.total if public else 0},
            "hidden": {"passed": r.hidden.passed, "total": r.hidden.total},
            "flags": list(self.flags),
            "reward": self.reward,
            "reasons": list(self.reasons),
            # every finding gated the reward; the list shown is capped, with a count of every rule
            "static_flags": [f.to_json() for f in shown_flags(r.static_flags)],
            "static_flag_counts": rule_counts(r.static_flags),
            "cases": {
                "public": [c.to_json() for c in public.cases] if public else [],
                "hidden": [c.to_json(with_message=False) for c in r.hidden.cases],
            },
            "suite_kinds": {"public": public.kind if public else None, "hidden": r.hidden.kind},
            "run": r.run.to_json(),
            "policy": {"name": self.policy[0], "version": self.policy[1]},
            "grader_version": GRADER_VERSION,
            "task_version": self.task_version,
            # a solution in another language says which, and how its build went (python results as before)
            **({"language": r.language} if r.language != "python" else {}),
            **({"compile": r.compile.to_json()} if r.compile is not None else {}),
            **r.extra,
        }


def signals_of(result: GradeResult) -> Signals:
    """The executor's and the verifier's events for ``result``, as the pipeline would have joined them."""
    run = sandbox_run(result.run, result.infra_error)
    public = result.public
    execution = ExecutionResult(
        **_IDS,
        worker="grade",
        suite_kind=public.kind if public else None,  # type: ignore[arg-type]  # a suite kind
        # a task without public tests: the executor reports an ok run with no cases
        run=run if public else no_run(run.backend),
        cases=[CaseResult(case_id=c.id, status=c.status) for c in (public.cases if public else ())],
        passed=public.passed if public else 0,
        total=public.total if public else 0,
    )
    hidden = result.hidden
    verdict = HiddenVerdict(
        **_IDS,
        worker="grade",
        grader_version=GRADER_VERSION,
        suite_kind=hidden.kind,  # type: ignore[arg-type]  # a suite kind
        run=run,
        cases=[HiddenCaseResult(case_id=c.id, status=c.status) for c in hidden.cases],
        passed=hidden.passed,
        total=hidden.total,
        static_flags=[
            StaticFlag(rule=f.rule, message=fit(StaticFlag, "message", f.message), line=f.line)
            for f in shown_flags(result.static_flags)
        ],
        static_flag_counts=rule_counts(result.static_flags),
    )
    return Signals(execution, verdict)


def gating(flags: tuple[str, ...]) -> tuple[str, ...]:
    """The hack rules among a reward's flags (not ``warn:<rule>``, not the overfit sign): what gated it."""
    return tuple(f for f in flags if f != PUBLIC_PASSED_HIDDEN_FAILED and not f.startswith(WARN_FLAG_PREFIX))


def apply_policy(result: GradeResult, policy: Policy) -> Graded:
    """Reward ``result`` with ``policy``; no judge is awaited. A sandbox_error, which the pipeline withholds
    until a retry, is reward 0.0 here: the grader already retried, and the status says it is no verdict."""
    outcome = evaluate(policy, signals_of(result))
    remarks = ((fit_item(RewardEvent, "reasons", result.infra_error),) if result.infra_error else ()) + result.notes
    name = (policy.name, policy.version)
    if isinstance(outcome, Scored):
        return Graded(result, outcome.reward, gating(outcome.flags), outcome.reasons + remarks, name)
    return Graded(result, 0.0, (), (SANDBOX_ERROR_REASON, *remarks), name)


@dataclass(frozen=True, slots=True)
class PolicyGrader:
    """A grader whose results carry ``policy``'s reward: what ``rewardstream grade`` runs."""

    grader: Grader
    policy: Policy

    def grade(self, task: Task, code: str, *, generation_id: str = "", language: str = "python") -> Graded:
        """Grade ``code`` (in ``language``) for ``task`` and reward it, naming the task's version."""
        graded = self.grader.grade(task, code, generation_id=generation_id, language=language)
        return replace(apply_policy(graded, self.policy), task_version=task_version(task))
