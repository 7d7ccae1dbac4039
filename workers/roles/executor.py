"""The executor: a generation's public suite in a sandbox -> ``ExecutionResult`` on ``rs.executions``.

Why its own run (never shared with the verifier's): its result is the feedback a trainer (and the policy in
a multi-turn episode) may read, so it must never be computed in the same process as hidden tests. It stores
the code, its per-case results and the candidate's full stdout/stderr when longer than the inline tail
(``event.artifacts``); only this public run's output is ever shown.

An episode's submit (``workspace_ref``) runs the public suite on the graded workspace (``roles.workspace``:
protected paths reset to the original). A public ``command`` suite (the agent's own tests) is feedback
only, never a gate: its result has no cases (``suite_kind`` None), so the policy's public gates pass it
whatever it printed, and its exit status and output are the feedback. An image task has no public suite: its
submit publishes nothing here (its verifier's verdict alone makes its reward).

A generation in another language than python is graded in it (``event.language``; one the task's suites do
not accept is an invalid event). A public run whose program did not build gets the compiler's output as its
feedback: its own build's, which never saw a test.
"""

from __future__ import annotations

from concurrent.futures import Future

from schemas.caps import fit
from schemas.events import OUTPUT_TAIL_MAX_CHARS, ArtifactName, CaseResult, ExecutionResult, GenerationEvent, LogValue
from schemas.ids import result_ids
from schemas.status import UNSUPPORTED_LANGUAGE, SandboxStatus
from schemas.tasks import CommandSuite, PublicTask
from schemas.text import sanitize_text
from workers.grading import Grader
from workers.grading.grader import CompileInfo, public_suite
from workers.grading.suites import AnySuite, SuiteOutcome
from workers.handler import Done, Outcome, Source, encode_output
from workers.roles.common import RoleContext, one_shot
from workers.roles.runs import (
    Ran,
    artifact_fields,
    log_level,
    no_run,
    pending_uploads,
    run_fields,
    sandbox_run,
    unusable_run,
)
from workers.roles.workspace import EpisodeWorkspaces, Graded, Unusable


def output_tail(data: bytes, truncated: bool) -> tuple[str, bool]:
    """The inline form of captured output: its last ``OUTPUT_TAIL_MAX_CHARS`` characters (invalid UTF-8
    replaced) and whether that is less than the candidate wrote."""
    text = data.decode("utf-8", "replace")
    if len(text) > OUTPUT_TAIL_MAX_CHARS:
        return text[-OUTPUT_TAIL_MAX_CHARS:], True
    return text, truncated


def feedback(outcome: SuiteOutcome | None) -> str:
    """What the policy may read for its next turn: counts and the first failing public cases."""
    if outcome is None:
        return "the task has no public tests"
    lines = [f"{outcome.passed}/{outcome.total} public tests passed"]
    for case in [c for c in outcome.cases if c.status != "passed"][:5]:
        lines.append(f"case {case.id}: {case.status}" + (f": {case.message}" if case.message else ""))
    return fit(ExecutionResult, "feedback", "\n".join(lines))


def command_feedback(outcome: SuiteOutcome) -> str:
    """What the policy may read of a public command suite's run: how it ended (it gates nothing)."""
    case = outcome.cases[0] if outcome.cases else None
    if case is not None and case.status == "passed":
        return "the public command exited 0 (feedback only: the hidden tests decide)"
    ended = case.message if case is not None and case.message else "no result"
    return fit(
        ExecutionResult, "feedback", f"the public command failed: {ended} (feedback only: the hidden tests decide)"
    )


def compile_feedback(info: CompileInfo) -> str:
    """What the policy may read of a public run whose program did not build: why, and the compiler's output."""
    lines = [info.reason or info.status]
    for stream in (info.output.stderr, info.output.stdout):
        text = stream.decode("utf-8", "replace").strip()
        if text:
            lines.append(text)
    return fit(ExecutionResult, "feedback", sanitize_text("\n".join(lines)))


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
        read = ctx.tasks.for_event(event)
        if event.workspace_ref is not None and read.task.environment is not None:
            return ctx.image_task_skipped(event, source, read.version)  # no public suite: the verifier decides
        if event.workspace_ref is not None:
            ran = self._episode(event, read.task, read.version)
            artifacts["code"] = event.workspace_ref  # the agent's final snapshot, already in S3 by its content
            code_upload = None
        else:
            task = one_shot(read.task)
            code = ctx.code_of(event)
            ran = self._run(code, task, public_suite(task), None, event.language)
            code_upload = ctx.store_code(artifacts, event, code)
        return self._publish(event, source, ran, artifacts, code_upload, read.version)

    def _episode(self, event: GenerationEvent, task: PublicTask, version: str | None) -> Ran:
        graded = self.workspaces.graded(event, task, version)
        if isinstance(graded, Unusable):
            return Ran(
                None,
                unusable_run(graded, self.grader.sandbox.name),
                1,
                feedback=fit(ExecutionResult, "feedback", graded.reason),
            )
        return self._run("", task, task.public_tests, graded)

    def _run(
        self, code: str, task: PublicTask, suite: AnySuite | None, graded: Graded | None, language: str = "python"
    ) -> Ran:
        if suite is None:
            return Ran(None, no_run(self.grader.sandbox.name), 1)
        ran = self.grader.run_suites(
            code, task.entry_point, [("public", suite)], task.limits, prompt=task.prompt,
            workspace=None if graded is None else graded.job(), language=language,
        )  # fmt: skip
        outcome = ran.outcomes[0]
        # the public run's output only: this is what the policy may see
        feedback_text = command_feedback(outcome) if isinstance(suite, CommandSuite) else None
        if ran.compile is not None and ran.compile.status is not SandboxStatus.OK:
            feedback_text = compile_feedback(ran.compile)
        elif ran.run.status == UNSUPPORTED_LANGUAGE and ran.run.error:
            feedback_text = fit(ExecutionResult, "feedback", ran.run.error)
        return Ran(outcome, sandbox_run(ran.run, ran.infra_error), ran.run.attempts, ran.output, feedback_text)

    def _publish(  # noqa: PLR0917
        self,
        event: GenerationEvent,
        source: Source,
        ran: Ran,
        artifacts: dict[ArtifactName, str],
        code_upload: Future[object] | None,
        version: str | None,
    ) -> Outcome:
        ctx = self.context
        outcome, run, output = ran.outcome, ran.run, ran.output
        gated = outcome is not None and outcome.kind != "command"  # a command suite is feedback, never cases
        cases = [CaseResult(case_id=c.id, status=c.status,
                            message=(c.message or None) and fit(CaseResult, "message", c.message))
                 for c in (outcome.cases if outcome is not None and gated else ())]  # fmt: skip
        stdout, stdout_cut = output_tail(output.stdout, output.stdout_truncated)
        stderr, stderr_cut = output_tail(output.stderr, output.stderr_truncated)
        uploads = pending_uploads(
            code_upload,
            ctx.store_json(artifacts, "cases", [c.model_dump(mode="json") for c in cases]),
            # Output fully inline is not stored again; what was cut is, as written (bytes, not the tail text).
            ctx.store(artifacts, "stdout", output.stdout) if stdout_cut and output.stdout else None,
            ctx.store(artifacts, "stderr", output.stderr) if stderr_cut and output.stderr else None,
        )
        result = ExecutionResult(
            **result_ids(event),
            task_version=version,
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
        fields: dict[str, LogValue] = run_fields(run, ran.attempts, result.passed, result.total)
        fields.update(stdout_bytes=output.stdout_bytes, stderr_bytes=output.stderr_bytes, task_version=version)
        artifact_fields(fields, artifacts)
        message = f"executor: {result.passed}/{result.total} public cases passed ({run.status})"
        record = ctx.log_record(event, source, log_level(run), message, fields)
        return Done((encode_output(ctx.output_topic, event, result),), record, run.status, uploads, run)
