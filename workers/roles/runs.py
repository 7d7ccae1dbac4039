"""A role's sandbox run as its result event and log record show it: what the executor and the verifier share.

Sandbox failures are already retried with backoff by the grader; what is left is published as
``run.status == "sandbox_error"``, never as a failed solution. A run that did not happen (no public suite,
an unusable workspace) is ``no_run``: nothing measured.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from schemas.caps import fit
from schemas.events import ArtifactName, LogLevel, LogValue, SandboxRun
from schemas.status import SandboxStatus
from workers.grading.grader import CandidateOutput, RunInfo
from workers.grading.suites import SuiteOutcome
from workers.roles.workspace import Unusable


@dataclass(frozen=True, slots=True)
class Ran:
    """One role's run, whichever way it was made: what both result events are built from."""

    outcome: SuiteOutcome | None
    run: SandboxRun
    attempts: int
    output: CandidateOutput = field(default_factory=CandidateOutput)
    feedback: str | None = None


def sandbox_run(run: RunInfo, infra_error: str | None) -> SandboxRun:
    """The event's view of a grade's run (the one way from the host's measured run to the wire's); an
    infrastructure problem is ``sandbox_error`` whatever the exit said."""
    measured = run.measured
    return SandboxRun(
        status=SandboxStatus.SANDBOX_ERROR if infra_error is not None else run.status,
        exit_code=measured.exit_code,
        signal=measured.signal if measured.signal is None or 1 <= measured.signal <= 128 else None,
        wall_ms=max(measured.wall_ms, 0.0),
        cpu_ms=max(measured.cpu_ms, 0.0),
        max_rss_kb=max(measured.max_rss_kb, 0),
        backend=measured.backend or "?",
        error=(infra_error or run.error or None) and fit(SandboxRun, "error", str(infra_error or run.error)),
        wait_ms=max(measured.wait_ms, 0.0),
        host_retries=max(run.host_retries, 0),
    )


def no_run(backend: str, status: SandboxStatus = SandboxStatus.OK, error: str | None = None) -> SandboxRun:
    """The run of a suite that did not run (a task without public tests, an unusable workspace): nothing
    measured."""
    error = None if error is None else fit(SandboxRun, "error", error)
    return SandboxRun(status=status, wall_ms=0.0, cpu_ms=0.0, max_rss_kb=0, backend=backend, error=error)


def unusable_run(unusable: Unusable, backend: str) -> SandboxRun:
    """The run of a workspace that could not be graded: none happened; the agent's snapshot is the cause."""
    return no_run(backend, SandboxStatus.CRASHED, unusable.reason)


def run_fields(run: SandboxRun, attempts: int, passed: int, total: int) -> dict[str, LogValue]:
    return {
        "status": run.status,
        "backend": run.backend,
        "wall_ms": round(run.wall_ms, 3),
        "cpu_ms": round(run.cpu_ms, 3),
        "wait_ms": round(run.wait_ms, 3),
        "host_retries": run.host_retries,
        "max_rss_kb": run.max_rss_kb,
        "exit_code": run.exit_code,
        "attempts": attempts,
        "passed": passed,
        "total": total,
        "error": run.error,
    }


def pending_uploads(*futures: Future[object] | None) -> tuple[Future[object], ...]:
    return tuple(f for f in futures if f is not None)


def artifact_fields(fields: dict[str, LogValue], artifacts: dict[ArtifactName, str]) -> None:
    for name, url in artifacts.items():
        fields[f"{name}_url"] = url


def log_level(run: SandboxRun) -> LogLevel:
    return "error" if run.status == "sandbox_error" else "info"
