"""An audit of one verdict: its hidden suite re-graded independently, on the other sandbox backend.

Why an event of its own (on ``rs.audits``): grader error is a measurement error, and it is only a rate if the
disagreements are recorded where anyone can count them per dataset and read them back one by one. An audit
never changes a reward: nothing joins this topic; it only records what a second run said.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from schemas.codec import Contract
from schemas.events import CaseStatus, Event, Id, ShortText
from schemas.status import RunStatusField
from schemas.tasks import CaseId

#: What an audit found. ``audit_sandbox_error``: the audit's own run failed on its host, so it says nothing
#: about the verdict (counted apart, never as a disagreement).
AuditOutcome = Literal["agree", "disagree", "audit_sandbox_error"]
#: How a verdict and its audit differ. ``pass_flip``: one says every hidden case passed and the other does not
#: (the difference a reward sees); ``passed_count``: they passed a different number of cases; ``case_status``:
#: a case's status differs (same count); ``run_status``: the runs ended differently (e.g. ok and timeout).
DisagreementKind = Literal["pass_flip", "passed_count", "case_status", "run_status"]
#: Case ids an audit event lists where the two differ (the rest are in the count).
MAX_DIFFERING_CASES = 64


class GradedRun(Contract):
    """One grading of the hidden suite, as the comparison sees it."""

    backend: ShortText = Field(description="sandbox backend that ran it (process, docker)")
    status: RunStatusField = Field(description="how the run ended")
    passed: int = Field(ge=0, description="hidden cases passed")
    total: int = Field(ge=0, description="hidden cases")


class DifferingCase(Contract):
    """A hidden case the verdict and its audit graded differently (statuses only, as verdicts carry them)."""

    case_id: CaseId = Field(description="id of the case in the task's hidden suite")
    verdict: CaseStatus | None = Field(description="its status in the verdict; None: the verdict lacks it")
    audit: CaseStatus | None = Field(description="its status in the audit; None: the audit lacks it")


class AuditEvent(Event):
    """A verdict re-graded on the other sandbox backend, and whether the two agree."""

    turn: int = Field(0, ge=0, le=10_000, description="turn of the generation the verdict is for")
    verdict_event_id: Id = Field(description="event_id of the audited HiddenVerdict")
    worker: ShortText = Field(description="host:pid of the auditor, for SREs")
    grader_version: ShortText = Field(description="version of the grader that re-graded it")
    verdict: GradedRun = Field(description="what the verdict said")
    audit: GradedRun = Field(description="what the audit's run said")
    outcome: AuditOutcome = Field(description="agree, disagree, or audit_sandbox_error (says nothing)")
    kinds: list[DisagreementKind] = Field(
        default_factory=list, max_length=4, description="how they disagree; empty unless outcome is disagree"
    )
    differing_cases: list[DifferingCase] = Field(
        default_factory=list, max_length=MAX_DIFFERING_CASES, description="cases graded differently (capped)"
    )
    audit_error: str | None = Field(None, max_length=4096, description="the audit run's host failure, if any")


#: The audit models, for the JSON Schema generator.
AUDIT_MODELS: tuple[type[Event], ...] = (AuditEvent,)
