"""A verdict against its audit: agree, disagree (how), or the audit's host failed (which says nothing).

Pure, on statuses only (what a verdict carries). Why a host failure of the audit is not a disagreement: it is
the infrastructure's fault on the auditor's side; counting it as one would make verdict error look worse the
busier the auditor's host is. Why ``skip_reason``: a verdict the auditor cannot re-grade the same way (its own
run was a sandbox_error, an image task's verifier, no stored code) is counted as skipped, never as agreement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from schemas.audits import MAX_DIFFERING_CASES, AuditOutcome, DifferingCase, DisagreementKind, GradedRun
from schemas.events import CaseStatus, HiddenCaseResult, HiddenVerdict
from schemas.status import SandboxStatus

#: Why a verdict was not audited (a bounded label).
SkipReason = str
VERDICT_SANDBOX_ERROR: SkipReason = "verdict_sandbox_error"
IMAGE_TASK: SkipReason = "image_task"
WORKSPACE: SkipReason = "workspace"
NO_CODE: SkipReason = "no_code"
UNKNOWN_BACKEND: SkipReason = "unknown_backend"


@dataclass(frozen=True, slots=True)
class Finding:
    """What the comparison found."""

    outcome: AuditOutcome
    kinds: tuple[DisagreementKind, ...] = ()
    differing: tuple[DifferingCase, ...] = field(default=())


def skip_reason(verdict: HiddenVerdict) -> SkipReason | None:
    """Why this verdict cannot be audited by re-running its hidden suite on stored code, or None."""
    if verdict.run.status == SandboxStatus.SANDBOX_ERROR:
        return VERDICT_SANDBOX_ERROR  # no verdict on the work to check
    if verdict.suite_kind == "verifier":
        return IMAGE_TASK
    if "code" not in verdict.artifacts:
        return NO_CODE
    return None


def verdict_run(verdict: HiddenVerdict) -> GradedRun:
    """The verdict as the comparison sees it."""
    return GradedRun(backend=verdict.run.backend, status=verdict.run.status, passed=verdict.passed,
                     total=verdict.total)  # fmt: skip


def compare(
    verdict: HiddenVerdict, audit: GradedRun, cases: Sequence[HiddenCaseResult], *, audit_failed: bool
) -> Finding:
    """Compare ``verdict`` with an audit run's ``audit`` figures and per-case ``cases``."""
    if audit_failed or audit.status == SandboxStatus.SANDBOX_ERROR:
        return Finding("audit_sandbox_error")
    kinds: list[DisagreementKind] = []
    if (verdict.passed == verdict.total) != (audit.passed == audit.total):
        kinds.append("pass_flip")
    if verdict.passed != audit.passed:
        kinds.append("passed_count")
    differing = differing_cases(verdict.cases, cases)
    if differing and "passed_count" not in kinds:
        kinds.append("case_status")
    if verdict.run.status != audit.status:
        kinds.append("run_status")
    if not kinds:
        return Finding("agree")
    return Finding("disagree", tuple(kinds), tuple(differing[:MAX_DIFFERING_CASES]))


def differing_cases(verdict: Sequence[HiddenCaseResult], audit: Sequence[HiddenCaseResult]) -> list[DifferingCase]:
    """Every case whose status differs, in the verdict's order, then the audit's own extra ones."""
    theirs: dict[str, CaseStatus] = {c.case_id: c.status for c in audit}
    ours: dict[str, CaseStatus] = {c.case_id: c.status for c in verdict}
    differ = [
        DifferingCase(case_id=case_id, verdict=status, audit=theirs.get(case_id))
        for case_id, status in ours.items()
        if theirs.get(case_id) != status
    ]
    differ += [
        DifferingCase(case_id=case_id, verdict=None, audit=status)
        for case_id, status in theirs.items()
        if case_id not in ours
    ]
    return differ
