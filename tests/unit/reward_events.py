"""Event factories for reward processor tests (unit and integration)."""

from __future__ import annotations

from typing import TypedDict

from schemas.events import (
    CaseResult,
    ExecutionResult,
    HiddenCaseResult,
    HiddenVerdict,
    JudgeScore,
    SandboxRun,
    StaticFlag,
)
from schemas.result_rules import VerifierOutcome


def run(status: str = "ok") -> SandboxRun:
    return SandboxRun(status=status, exit_code=0, wall_ms=5.0, cpu_ms=4.0, max_rss_kb=1000, backend="process")  # type: ignore[arg-type]


class Ids(TypedDict):
    """The ids every event of one generation shares (unpacked with ``**`` into an event's fields)."""

    generation_id: str
    episode_id: str
    run_id: str
    task_id: str


def ids(gid: str) -> Ids:
    return {"generation_id": gid, "episode_id": gid, "run_id": "run-1", "task_id": "HumanEval/0"}


def execution(gid: str, *, passed: int = 2, total: int = 2, status: str = "ok", attempt: int = 1) -> ExecutionResult:
    cases = [CaseResult(case_id=f"c{i}", status="passed" if i < passed else "failed") for i in range(total)]
    return ExecutionResult(
        **ids(gid),
        worker="test:1",
        suite_kind="call",
        run=run(status),
        cases=cases,
        passed=passed,
        total=total,
        attempt=attempt,
    )


def verdict(
    gid: str,
    *,
    passed: int = 3,
    total: int = 3,
    flags: tuple[str, ...] = (),
    status: str = "ok",
    attempt: int = 1,
    canary: bool = False,
) -> HiddenVerdict:
    cases = [HiddenCaseResult(case_id=f"h{i}", status="passed" if i < passed else "failed") for i in range(total)]
    return HiddenVerdict(
        **ids(gid),
        worker="test:1",
        grader_version="g1",
        suite_kind="call",
        run=run(status),
        cases=cases,
        passed=passed,
        total=total,
        attempt=attempt,
        static_flags=[StaticFlag(rule=r, message=r) for r in flags],
        canary=canary,
    )


def judgement(gid: str, score: float = 0.8) -> JudgeScore:
    return JudgeScore(**ids(gid), status="ok", score=score, judge_model="rubric", prompt_version="p1", latency_ms=1.0)


def verified(
    gid: str,
    reward: float | None = 1.0,
    *,
    reason: str | None = None,
    status: str = "ok",
    attempt: int = 1,
    flags: tuple[str, ...] = (),
) -> HiddenVerdict:
    """An image task's verdict: its verifier wrote ``reward`` to reward.txt (None: a sandbox_error, no outcome)."""
    outcome = (
        None if reward is None else VerifierOutcome(reward=reward, source="reward.txt", reason=reason, seconds=1.5)
    )
    return HiddenVerdict(
        **ids(gid), worker="test:1", grader_version="g1", suite_kind="verifier", run=run(status), passed=0, total=0,
        attempt=attempt, verifier=outcome, static_flags=[StaticFlag(rule=r, message=r) for r in flags],
    )  # fmt: skip
