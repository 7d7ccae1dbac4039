"""The auditor's counters: verdict error as a rate per dataset.

``rewardstream_audits_total{dataset, backend, outcome}`` is the denominator (backend: the audit's);
``rewardstream_audit_disagreements_total{dataset, kind}`` counts each way an audit disagreed (an audit may
disagree in several ways: ``pass_flip`` is the one a reward sees); ``rewardstream_audits_skipped_total{reason}``
counts verdicts in the sample that could not be re-graded. A host failure of the audit's run is its own
outcome, never a disagreement. Labels are bounded (``bus.labels``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from bus.labels import MAX_DATASETS, BoundedLabel, dataset_of
from schemas.audits import AuditEvent


class AuditMetrics:
    """The audit counters of one auditor, in its metrics registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._datasets = BoundedLabel(MAX_DATASETS)
        self.audits = Counter(
            "rewardstream_audits", "Verdicts re-graded on the other sandbox backend, by outcome (agree, disagree, "
            "audit_sandbox_error: the audit's host failed, says nothing)", ("dataset", "backend", "outcome"),
            registry=registry,
        )  # fmt: skip
        self.disagreements = Counter(
            "rewardstream_audit_disagreements", "Audits that disagree with the verdict, by kind (pass_flip: the "
            "reward would differ; passed_count, case_status, run_status)", ("dataset", "kind"), registry=registry,
        )  # fmt: skip
        self.skipped = Counter(
            "rewardstream_audits_skipped", "Sampled verdicts not re-graded, by reason", ("dataset", "reason"),
            registry=registry,
        )  # fmt: skip

    def observe(self, audit: AuditEvent) -> None:
        """Count one committed audit."""
        dataset = self._datasets(dataset_of(audit.task_id))
        self.audits.labels(dataset, audit.audit.backend, audit.outcome).inc()
        for kind in audit.kinds:
            self.disagreements.labels(dataset, kind).inc()

    def skip(self, task_id: str, reason: str) -> None:
        """Count a sampled verdict that could not be audited."""
        self.skipped.labels(self._datasets(dataset_of(task_id)), reason).inc()
