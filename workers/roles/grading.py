"""Executor and verifier: the two roles that run a generation in a sandbox through the grader.

Why one run per role and not a shared one: the executor's result is the feedback a trainer (and the policy
in a multi-turn episode) may read, so it must never be computed in the same process as hidden tests; the
verifier's is the evidence a reward is built on. Sandbox failures are already retried with backoff by the
grader; what is left is published as ``run.status == "sandbox_error"``, never as a failed solution.

Artifacts (``event.artifacts``): both roles store the code and their per-case results; the executor also
stores the candidate's full stdout/stderr when it is longer than the inline tail. Only the public run's
output is ever shown: the verifier's run (hidden inputs) keeps its output to itself.

An episode's submit (``workspace_ref``, a workspace task) runs the same way on the graded workspace
(``roles.workspace``: protected paths reset to the original), each role in its own fresh sandbox run: the
verifier's hidden suite, the executor's public suite. A public ``command`` suite (the agent's own tests) is
feedback only, never a gate: its result has no cases (``suite_kind`` None), so the policy's public gates
pass it whatever it printed, and its exit status and output are the feedback. An unusable snapshot is the
agent's failure (``run.status == "crashed"`` with the reason in ``run.error``; every hidden case ``error``).
Static analysis is not run on workspaces: their hidden suites are call/io only, compared outside the sandbox.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from schemas.events import (
    OUTPUT_TAIL_MAX_CHARS,
    ArtifactName,
    CaseResult,
    ExecutionResult,
    GenerationEvent,
    HiddenCaseResult,
    HiddenVerdict,
    LogLevel,
    LogValue,
    SandboxRun,
    StaticFlag,
)
from schemas.tasks import CommandSuite, PublicTask
from schemas.text import sanitize_text
from workers.grading import Grader
from workers.grading.grader import GRADER_VERSION, CandidateOutput, CompileInfo, RunInfo, public_suite
from workers.grading.static_analysis import Flag, analyze, rule_counts, shown_flags
from workers.grading.suites import AnySuite, SuiteOutcome, failed_suite
from workers.handler import Done, Outcome, Source, encode_output
from workers.roles.common import RoleContext, accepted, one_shot
from workers.roles.workspace import EpisodeWorkspaces, Graded, Unusable


def sandbox_run(run: RunInfo, infra_error: str | None) -> SandboxRun:
    """The event's view of a run; an infrastructure problem is ``sandbox_error`` whatever the exit said."""
    status = "sandbox_error" if infra_error is not None else run.status
    return SandboxRun(
        status=status,  # type: ignore[arg-type]  # RunInfo.status is a SandboxStatus value
        exit_code=run.exit_code,
        signal=run.signal if run.signal is None or 1 <= run.signal <= 128 else None,
        wall_ms=max(run.wall_ms, 0.0),
        cpu_ms=max(run.cpu_ms, 0.0),
        max_rss_kb=max(run.max_rss_kb, 0),
        backend=run.backend or "?",
        error=(infra_error or run.error or None) and str(infra_error or run.error)[:4096],
    )


def _run_fields(run: SandboxRun, attempts: int, passed: int, total: int) -> dict[str, LogValue]:
    return {
        "status": run.status,
        "backend": run.backend,
        "wall_ms": round(run.wall_ms, 3),
        "cpu_ms": round(run.cpu_ms, 3),
        "max_rss_kb": run.max_rss_kb,
        "exit_code": run.exit_code,
        "attempts": attempts,
        "passed": passed,
        "total": total,
        "error": run.error,
    }


def _uploads(*futures: Future[object] | None) -> tuple[Future[object], ...]:
    return tuple(f for f in futures if f is not None)


def output_tail(data: bytes, truncated: bool) -> tuple[str, bool]:
    """The inline form of captured output: its last ``OUTPUT_TAIL_MAX_CHARS`` characters (invalid UTF-8
    replaced) and whether that is less than the candidate wrote."""
    text = data.decode("utf-8", "replace")
    if len(text) > OUTPUT_TAIL_MAX_CHARS:
        return text[-OUTPUT_TAIL_MAX_CHARS:], True
    return text, truncated


def _artifact_fields(fields: dict[str, LogValue], artifacts: dict[ArtifactName, str]) -> None:
    for name, url in artifacts.items():
        fields[f"{name}_url"] = url


def _level(run: SandboxRun) -> LogLevel:
    return "error" if run.status == "sandbox_error" else "info"


def feedback(outcome: SuiteOutcome | None) -> str:
    """What the policy may read for its next turn: counts and the first failing public cases."""
    if outcome is None:
        return "the task has no public tests"
    lines = [f"{outcome.passed}/{outcome.total} public tests passed"]
    for case in [c for c in outcome.cases if c.status != "passed"][:5]:
        lines.append(f"case {case.id}: {case.status}" + (f": {case.message}" if case.message else ""))
    return "\n".join(lines)[:4096]


def compile_feedback(info: CompileInfo) -> str:
    """What the policy may read of a public run whose program did not build: why, and the compiler's output."""
    lines = [info.reason or info.status]
    for stream in (info.output.stderr, info.output.stdout):
        text = stream.decode("utf-8", "replace").strip()
        if text:
            lines.append(text)
    return sanitize_text("\n".join(lines))[:4096]


def unusable_run(unusable: Unusable, backend: str) -> SandboxRun:
    """The run of a workspace that could not be graded: none happened; the agent's snapshot is the cause."""
    return SandboxRun(status="crashed", wall_ms=0.0, cpu_ms=0.0, max_rss_kb=0, backend=backend,
                      error=unusable.reason[:4096])  # fmt: skip


def command_feedback(outcome: SuiteOutcome) -> str:
    """What the policy may read of a public command suite's run: how it ended (it gates nothing)."""
    case = outcome.cases[0] if outcome.cases else None
    if case is not None and case.status == "passed":
        return "the public command exited 0 (feedback only: the hidden tests decide)"
    ended = case.message if case is not None and case.message else "no result"
    return f"the public command failed: {ended} (feedback only: the hidden tests decide)"[:4096]


@dataclass(frozen=True, slots=True)
class _Ran:
    """One role's run, whichever way it was made: what both result events are built from."""

    outcome: SuiteOutcome | None
    run: SandboxRun
    attempts: int
    output: CandidateOutput = field(default_factory=CandidateOutput)
    feedback: str | None = None


class ExecutorHandler:
    """Public tests -> ExecutionResult (feedback)."""

    def __init__(self, context: RoleContext, grader: Grader) -> None:
        self.context = context
        self.grader = grader
        self.workspaces = EpisodeWorkspaces(context)

    def handle(self, event: GenerationEvent, source: Source) -> Outcome:
        """Run the public suite of the event's task on its code (or on its episode's graded workspace)."""
        ctx = self.context
        artifacts: dict[ArtifactName, str] = {}
        if event.workspace_ref is not None:
            ran = self._episode(event)
            artifacts["code"] = event.workspace_ref  # the agent's final snapshot, already in S3 by its content
            code_upload = None
        else:
            task = accepted(one_shot(ctx.tasks.public(event.task_id)), event.language)
            code = ctx.code_of(event)
            ran = self._run(code, task, public_suite(task), None, event.language)
            code_upload = ctx.store_code(artifacts, event, code)
        return self._publish(event, source, ran, artifacts, code_upload)

    def _episode(self, event: GenerationEvent) -> _Ran:
        task = self.context.tasks.public(event.task_id)
        graded = self.workspaces.graded(event, task)
        if isinstance(graded, Unusable):
            return _Ran(None, unusable_run(graded, self.grader.sandbox.name), 1, feedback=graded.reason[:4096])
        return self._run("", task, task.public_tests, graded)

    def _run(
        self, code: str, task: PublicTask, suite: AnySuite | None, graded: Graded | None, language: str = "python"
    ) -> _Ran:
        if suite is None:
            run = SandboxRun(status="ok", wall_ms=0.0, cpu_ms=0.0, max_rss_kb=0, backend=self.grader.sandbox.name)
            return _Ran(None, run, 1)
        ran = self.grader.run_suites(
            code, task.entry_point, [("public", suite)], task.limits, prompt=task.prompt,
            workspace=None if graded is None else graded.job(), language=language,
        )  # fmt: skip
        outcome = ran.outcomes[0]
        # the public run's output only: this is what the policy may see
        feedback_text = command_feedback(outcome) if isinstance(suite, CommandSuite) else None
        if ran.compile is not None and ran.compile.status != "ok":
            feedback_text = compile_feedback(ran.compile)
        return _Ran(outcome, sandbox_run(ran.run, ran.infra_error), ran.run.attempts, ran.output, feedback_text)

    def _publish(
        self,
        event: GenerationEvent,
        source: Source,
        ran: _Ran,
        artifacts: dict[ArtifactName, str],
        code_upload: Future[object] | None,
    ) -> Outcome:
        ctx = self.context
        outcome, run, output = ran.outcome, ran.run, ran.output
        gated = outcome is not None and outcome.kind != "command"  # a command suite is feedback, never cases
        cases = [CaseResult(case_id=c.id, status=c.status, message=(c.message or None) and c.message[:1024])
                 for c in (outcome.cases if outcome is not None and gated else ())]  # fmt: skip
        stdout, stdout_cut = output_tail(output.stdout, output.stdout_truncated)
        stderr, stderr_cut = output_tail(output.stderr, output.stderr_truncated)
        uploads = _uploads(
            code_upload,
            ctx.store_json(artifacts, "cases", [c.model_dump(mode="json") for c in cases]),
            # Output fully inline is not stored again; what was cut is, as written (bytes, not the tail text).
            ctx.store(artifacts, "stdout", output.stdout) if stdout_cut and output.stdout else None,
            ctx.store(artifacts, "stderr", output.stderr) if stderr_cut and output.stderr else None,
        )
        result = ExecutionResult(
            generation_id=event.generation_id,
            episode_id=event.episode_id,
            run_id=event.run_id,
            task_id=event.task_id,
            turn=event.turn,
            attempt=min(max(ran.attempts, 1), 100),
            worker=ctx.worker,
            suite_kind=outcome.kind if outcome is not None and gated else None,  # type: ignore[arg-type]
            run=run,
            cases=cases,
            passed=sum(1 for c in cases if c.status == "passed"),
            total=len(cases),
            stdout=stdout,
            stderr=stderr,
            stdout_truncated=stdout_cut,
            stderr_truncated=stderr_cut,
            feedback=ran.feedback or feedback(outcome),
            artifacts=artifacts,
        )
        fields: dict[str, LogValue] = _run_fields(run, ran.attempts, result.passed, result.total)
        fields.update(stdout_bytes=output.stdout_bytes, stderr_bytes=output.stderr_bytes)
        _artifact_fields(fields, artifacts)
        message = f"executor: {result.passed}/{result.total} public cases passed ({run.status})"
        record = ctx.log_record(event, source, _level(run), message, fields)
        return Done((encode_output(ctx.output_topic, event, result),), record, run.status, uploads)


class VerifierHandler:
    """Hidden tests + static analysis -> HiddenVerdict."""

    def __init__(self, context: RoleContext, grader: Grader) -> None:
        self.context = context
        self.grader = grader
        self.workspaces = EpisodeWorkspaces(context)

    def handle(self, event: GenerationEvent, source: Source) -> Outcome:
        """Run the hidden suite (in its own sandbox run) and analyse the code (or, for an episode's submit,
        the hidden suite on its graded workspace)."""
        ctx = self.context
        artifacts: dict[ArtifactName, str] = {}
        if event.workspace_ref is not None:
            ran, flags = self._episode(event), []
            artifacts["code"] = event.workspace_ref  # the agent's final snapshot, already in S3 by its content
            code_upload = None
        else:
            task = accepted(one_shot(ctx.tasks.task(event.task_id)), event.language)
            code = ctx.code_of(event)
            flags = analyze(code) if event.language == "python" else []  # the analysis reads Python only
            got = self.grader.run_suites(
                code, task.entry_point, [("hidden", task.hidden_tests)], task.limits, prompt=task.prompt,
                language=event.language,
            )  # fmt: skip
            ran = _Ran(got.outcomes[0], sandbox_run(got.run, got.infra_error), got.run.attempts)
            code_upload = ctx.store_code(artifacts, event, code)
        return self._publish(event, source, ran, flags, artifacts, code_upload)

    def _episode(self, event: GenerationEvent) -> _Ran:
        """The hidden suite in a fresh sandbox from the graded workspace: its cases exist only in that run."""
        task = self.context.tasks.task(event.task_id)
        graded = self.workspaces.graded(event, task)
        if isinstance(graded, Unusable):
            outcome = failed_suite(task.hidden_tests, "hidden", "error", graded.reason)
            return _Ran(outcome, unusable_run(graded, self.grader.sandbox.name), 1)
        got = self.grader.run_suites(
            "", task.entry_point, [("hidden", task.hidden_tests)], task.limits, workspace=graded.job()
        )
        return _Ran(got.outcomes[0], sandbox_run(got.run, got.infra_error), got.run.attempts)

    def _publish(  # noqa: PLR0917
        self,
        event: GenerationEvent,
        source: Source,
        ran: _Ran,
        flags: list[Flag],
        artifacts: dict[ArtifactName, str],
        code_upload: Future[object] | None,
    ) -> Outcome:
        ctx = self.context
        outcome, run = ran.outcome, ran.run
        if outcome is None:  # a verifier always runs its hidden suite
            raise ValueError("verifier: no hidden outcome")
        cases = [HiddenCaseResult(case_id=c.id, status=c.status) for c in outcome.cases]
        uploads = _uploads(
            code_upload,
            # statuses only: nothing about hidden inputs or expected values, and no output of this run
            ctx.store_json(artifacts, "cases", [c.model_dump(mode="json") for c in cases]),
        )
        verdict = HiddenVerdict(
            generation_id=event.generation_id,
            episode_id=event.episode_id,
            run_id=event.run_id,
            task_id=event.task_id,
            turn=event.turn,
            attempt=min(max(ran.attempts, 1), 100),
            worker=ctx.worker,
            grader_version=GRADER_VERSION,
            suite_kind=outcome.kind,  # type: ignore[arg-type]
            run=run,
            cases=cases,
            passed=sum(1 for c in cases if c.status == "passed"),
            total=len(cases),
            static_flags=[StaticFlag(rule=f.rule, message=f.message[:1024], line=f.line) for f in shown_flags(flags)],
            static_flag_counts=rule_counts(flags),
            artifacts=artifacts,
        )
        fields = _run_fields(run, ran.attempts, verdict.passed, verdict.total)
        fields["flags"] = ",".join(sorted({f.rule for f in flags}))[:1024]
        _artifact_fields(fields, artifacts)
        message = f"verifier: {verdict.passed}/{verdict.total} hidden cases passed ({run.status})"
        record = ctx.log_record(event, source, _level(run), message, fields)
        return Done((encode_output(ctx.output_topic, event, verdict),), record, run.status, uploads)
