"""The verifier: a generation's hidden suite in a sandbox, and static analysis of its code -> ``HiddenVerdict``
on ``rs.verdicts``, the evidence a reward is built on.

Its run has hidden inputs, so it keeps its output to itself: the verdict and the stored per-case results
(``event.artifacts``) carry case ids and statuses only. An episode's submit (``workspace_ref``) runs the
hidden suite in a fresh sandbox from the graded workspace (``roles.workspace``); an unusable snapshot is the
agent's failure (``run.status == "crashed"`` with the reason in ``run.error``; every hidden case ``error``).
Static analysis is not run on workspaces: their hidden suites are call/io only, compared outside the sandbox.
An image task's submit is verified by the task's own verifier in a fresh container (``roles.image_verifier``):
its verdict has ``suite_kind`` verifier, no cases, and the reward the verifier wrote in ``verifier``.
A generation in another language than python is graded in it (``event.language``; one the task's suites do
not accept is an invalid event); static analysis reads Python only, so such code has no static flags.
"""

from __future__ import annotations

from concurrent.futures import Future

from schemas.caps import fit
from schemas.events import ArtifactName, GenerationEvent, HiddenCaseResult, HiddenVerdict, StaticFlag
from schemas.ids import result_ids
from schemas.tasks import Task
from workers.containers.task_host import ImageTaskHost, NoImageTaskHost
from workers.grading import Grader
from workers.grading.grader import GRADER_VERSION
from workers.grading.static_analysis import Flag, analyze, rule_counts, shown_flags
from workers.grading.suites import failed_suite
from workers.handler import Done, Outcome, Source, encode_output
from workers.roles.common import RoleContext, one_shot
from workers.roles.image_verifier import ImageVerifier, Verified
from workers.roles.runs import Ran, artifact_fields, log_level, pending_uploads, run_fields, sandbox_run, unusable_run
from workers.roles.workspace import EpisodeWorkspaces, Unusable

#: Characters of the comma-joined rule ids a verdict's log line carries (the verdict has them all).
_FLAGS_LOGGED_CHARS = 1024


class VerifierHandler:
    """Hidden tests + static analysis -> HiddenVerdict."""

    def __init__(
        self, context: RoleContext, grader: Grader, images: ImageTaskHost | NoImageTaskHost | None = None
    ) -> None:
        self.context = context
        self.grader = grader
        self.workspaces = EpisodeWorkspaces(context)
        self.images = ImageVerifier(self.workspaces, images or NoImageTaskHost("no docker daemon was given to it"))

    def handle(self, event: GenerationEvent, source: Source) -> Outcome:
        """Run the hidden suite (in its own sandbox run) and analyse the code (or, for an episode's submit,
        the hidden suite on its graded workspace)."""
        ctx = self.context
        artifacts: dict[ArtifactName, str] = {}
        read = ctx.tasks.full_for_event(event)
        if event.workspace_ref is not None and read.task.environment is not None:
            verified = self.images.verify(event, read.task)
            return self._image_task(event, source, verified, read.version, canary=read.task.canary)
        if event.workspace_ref is not None:
            ran, flags = self._episode(event, read.task, read.version), []
            artifacts["code"] = event.workspace_ref  # the agent's final snapshot, already in S3 by its content
            code_upload = None
        else:
            task = one_shot(read.task)
            code = ctx.code_of(event)
            flags = analyze(code) if event.language == "python" else []  # the analysis reads Python only
            got = self.grader.run_suites(
                code, task.entry_point, [("hidden", task.graded_suite)], task.limits, prompt=task.prompt,
                language=event.language,
            )  # fmt: skip
            ran = Ran(got.outcomes[0], sandbox_run(got.run, got.infra_error), got.run.attempts)
            code_upload = ctx.store_code(artifacts, event, code)
        return self._publish(event, source, ran, flags, artifacts, code_upload, read.version, canary=read.task.canary)

    def _episode(self, event: GenerationEvent, task: Task, version: str | None) -> Ran:
        """The hidden suite in a fresh sandbox from the graded workspace: its cases exist only in that run."""
        graded = self.workspaces.graded(event, task, version)
        if isinstance(graded, Unusable):
            outcome = failed_suite(task.graded_suite, "hidden", "error", graded.reason)
            return Ran(outcome, unusable_run(graded, self.grader.sandbox.name), 1)
        got = self.grader.run_suites(
            "", task.entry_point, [("hidden", task.graded_suite)], task.limits, workspace=graded.job()
        )
        return Ran(got.outcomes[0], sandbox_run(got.run, got.infra_error), got.run.attempts)

    def _image_task(
        self, event: GenerationEvent, source: Source, got: Verified, version: str | None, *, canary: bool
    ) -> Outcome:
        """The verdict of an image task: the verifier's reward, no cases, no static analysis (the agent's code
        is whatever its WORKDIR holds, in any language)."""
        ctx = self.context
        artifacts: dict[ArtifactName, str] = {}
        if event.workspace_ref is not None:
            artifacts["code"] = event.workspace_ref  # the agent's final WORKDIR, already in S3 by its content
        verdict = HiddenVerdict(
            **result_ids(event), task_version=version, attempt=min(max(got.attempts, 1), 100), worker=ctx.worker,
            grader_version=GRADER_VERSION, suite_kind="verifier", run=got.run, passed=0, total=0,
            verifier=got.outcome, artifacts=artifacts, canary=canary,
        )  # fmt: skip
        fields = run_fields(got.run, got.attempts, 0, 0)
        outcome = got.outcome
        fields.update(task_version=version, reward=None if outcome is None else outcome.reward,
                      reward_source=None if outcome is None else outcome.source,
                      reason=None if outcome is None else outcome.reason)  # fmt: skip
        artifact_fields(fields, artifacts)
        said = "no verdict" if outcome is None else f"reward {outcome.reward}"
        message = f"verifier: image task verified: {said} ({got.run.status})"
        record = ctx.log_record(event, source, log_level(got.run), message, fields)
        return Done((encode_output(ctx.output_topic, event, verdict),), record, got.run.status, (), got.run)

    def _publish(  # noqa: PLR0917
        self,
        event: GenerationEvent,
        source: Source,
        ran: Ran,
        flags: list[Flag],
        artifacts: dict[ArtifactName, str],
        code_upload: Future[object] | None,
        version: str | None,
        *,
        canary: bool,
    ) -> Outcome:
        ctx = self.context
        outcome, run = ran.outcome, ran.run
        if outcome is None:  # a verifier always runs its hidden suite
            raise ValueError("verifier: no hidden outcome")
        cases = [HiddenCaseResult(case_id=c.id, status=c.status) for c in outcome.cases]
        uploads = pending_uploads(
            code_upload,
            # statuses only: nothing about hidden inputs or expected values, and no output of this run
            ctx.store_json(artifacts, "cases", [c.model_dump(mode="json") for c in cases]),
        )
        verdict = HiddenVerdict(
            **result_ids(event),
            task_version=version,
            attempt=min(max(ran.attempts, 1), 100),
            worker=ctx.worker,
            grader_version=GRADER_VERSION,
            suite_kind=outcome.kind,  # type: ignore[arg-type]
            run=run,
            cases=cases,
            passed=sum(1 for c in cases if c.status == "passed"),
            total=len(cases),
            static_flags=[
                StaticFlag(rule=f.rule, message=fit(StaticFlag, "message", f.message), line=f.line)
                for f in shown_flags(flags)
            ],
            static_flag_counts=rule_counts(flags),
            artifacts=artifacts,
            canary=canary,
            language=event.language,
        )
        fields = run_fields(run, ran.attempts, verdict.passed, verdict.total)
        fields["flags"] = ",".join(sorted({f.rule for f in flags}))[:_FLAGS_LOGGED_CHARS]
        fields["task_version"] = version
        artifact_fields(fields, artifacts)
        message = f"verifier: {verdict.passed}/{verdict.total} hidden cases passed ({run.status})"
        record = ctx.log_record(event, source, log_level(run), message, fields)
        return Done((encode_output(ctx.output_topic, event, verdict),), record, run.status, uploads, run)
