"""The auditor: a sample of verdicts (``rs.verdicts``) re-graded on the other sandbox backend -> ``AuditEvent``
on ``rs.audits``, and the audit counters.

Why from the verdicts topic: the verdict says what to check against (its case statuses) and where it ran
(``run.backend``), and its stored code (``artifacts["code"]``, content-addressed: the bytes are checked
against their key) is what was graded. The re-grade is the verifier's own (the same grader, suite, limits,
prompt helpers and language) on the other backend, so a difference is the backend's or the verdict's, never
the audit's own choice. An audit never changes a reward: nothing reads ``rs.audits`` back into the join.
Counters count what was committed (``Done.committed``), so an aborted transaction's audit, re-run, counts once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from schemas.audits import AuditEvent, GradedRun
from schemas.caps import fit
from schemas.codec import encode
from schemas.events import HiddenCaseResult, HiddenVerdict, LogLevel, LogRecord, LogValue
from schemas.ids import generation_ids
from schemas.status import SandboxStatus
from workers.artifacts import ArtifactError
from workers.audits.compare import NO_CODE, UNKNOWN_BACKEND, WORKSPACE, compare, skip_reason, verdict_run
from workers.audits.metrics import AuditMetrics
from workers.audits.sample import audited, other_backend
from workers.grading import Grader
from workers.grading.grader import GRADER_VERSION
from workers.handler import Done, Outcome, Output, Source
from workers.roles.common import TaskSource, WorkspaceTaskEventError, one_shot
from workers.roles.runs import sandbox_run

#: Why a sampled verdict was not re-graded, beyond what the verdict alone says (``compare.skip_reason``).
BACKEND_UNAVAILABLE = "backend_unavailable"
CODE_UNAVAILABLE = "code_unavailable"


class CodeStore(Protocol):
    """Where verdicts' code is (``workers.artifacts.ArtifactStore``): bytes checked against their content key."""

    def get(self, url: str, *, max_bytes: int | None = None) -> bytes: ...


@dataclass(frozen=True)
class AuditContext:
    """What the auditor needs: tasks, stored code, a grader per backend it may audit on, where to write."""

    worker: str
    tasks: TaskSource
    artifacts: CodeStore | None
    graders: Mapping[str, Grader]
    output_topic: str
    rate: float
    metrics: AuditMetrics


class AuditHandler:
    """HiddenVerdict in the sample -> its hidden suite on the other backend -> AuditEvent."""

    def __init__(self, context: AuditContext) -> None:
        self.context = context

    def handle(self, verdict: HiddenVerdict, source: Source) -> Outcome:
        ctx = self.context
        if not audited(verdict.generation_id, ctx.rate):
            return Done((), None, "not_sampled")
        backend = other_backend(verdict.run.backend)
        reason = skip_reason(verdict) or (UNKNOWN_BACKEND if backend is None else None)
        grader = None if backend is None else ctx.graders.get(backend)
        if reason is None and grader is None:
            reason = BACKEND_UNAVAILABLE
        if reason is not None or grader is None:
            return self._skipped(verdict, source, reason or BACKEND_UNAVAILABLE)
        read = ctx.tasks.task(verdict.task_id, verdict.task_version)
        try:
            task = one_shot(read.task)
        except WorkspaceTaskEventError:
            return self._skipped(verdict, source, WORKSPACE)
        code = self._code(verdict)
        if code is None:
            return self._skipped(verdict, source, CODE_UNAVAILABLE if ctx.artifacts else NO_CODE)
        got = grader.run_suites(
            code, task.entry_point, [("hidden", task.graded_suite)], task.limits, prompt=task.prompt,
            language=verdict.language,
        )  # fmt: skip
        run = sandbox_run(got.run, got.infra_error)
        cases = [HiddenCaseResult(case_id=c.id, status=c.status) for c in got.outcomes[0].cases]
        side = GradedRun(backend=run.backend, status=run.status, passed=sum(c.status == "passed" for c in cases),
                         total=len(cases))  # fmt: skip
        found = compare(verdict, side, cases, audit_failed=got.infra_error is not None)
        event = AuditEvent(
            **generation_ids(verdict), task_version=verdict.task_version, turn=verdict.turn,
            verdict_event_id=verdict.event_id, worker=ctx.worker, grader_version=GRADER_VERSION,
            verdict=verdict_run(verdict), audit=side, outcome=found.outcome, kinds=list(found.kinds),
            differing_cases=list(found.differing),
            audit_error=None if run.status != SandboxStatus.SANDBOX_ERROR else run.error,
        )  # fmt: skip
        said = f"{found.outcome}" + (f" ({', '.join(found.kinds)})" if found.kinds else "")
        message = (f"auditor: verdict {verdict.passed}/{verdict.total} on {verdict.run.backend}, audit "
                   f"{side.passed}/{side.total} on {side.backend}: {said}")  # fmt: skip
        fields: dict[str, LogValue] = {
            "outcome": found.outcome, "kinds": ",".join(found.kinds), "backend": side.backend,
            "verdict_backend": verdict.run.backend, "status": run.status, "verdict_event_id": verdict.event_id,
        }  # fmt: skip
        level: LogLevel = "warning" if found.outcome == "disagree" else "info"
        record = _log(verdict, source, level, message, fields, worker=ctx.worker)
        status = "sandbox_error" if found.outcome == "audit_sandbox_error" else found.outcome
        output = Output(ctx.output_topic, verdict.key(), encode(event))
        return Done((output,), record, status, (), run, committed=lambda: ctx.metrics.observe(event))

    def _code(self, verdict: HiddenVerdict) -> str | None:
        """The graded program from S3 (its bytes checked against their content key), or None if gone."""
        store = self.context.artifacts
        if store is None:
            return None
        try:
            data = store.get(verdict.artifacts["code"])
        except ArtifactError as exc:
            if exc.outage:
                raise  # retried by the loop, never a skip
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def _skipped(self, verdict: HiddenVerdict, source: Source, reason: str) -> Done:
        metrics = self.context.metrics
        message = f"auditor: verdict not audited: {reason}"
        record = _log(verdict, source, "info", message, {"reason": reason}, worker=self.context.worker)
        return Done((), record, "skipped", committed=lambda: metrics.skip(verdict.task_id, reason))


def _log(
    verdict: HiddenVerdict,
    source: Source,
    level: LogLevel,
    message: str,
    fields: Mapping[str, LogValue],
    *,
    worker: str,
) -> LogRecord:
    """The one log record of an audit (or of a skip): ids, where the verdict came from, what was found."""
    return LogRecord(
        level=level, component="auditor", worker=worker, logger="rewardstream.worker.auditor",
        message=fit(LogRecord, "message", message), **generation_ids(verdict), topic=source.topic,
        partition=source.partition, offset=source.offset, fields={"turn": verdict.turn, **fields},
    )  # fmt: skip
