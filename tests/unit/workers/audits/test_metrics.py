"""The audit counters: audits by outcome, disagreements by kind, per bounded dataset."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from schemas.audits import AuditEvent, GradedRun
from tests.unit.reward_events import ids
from workers.audits.metrics import AuditMetrics


def event(outcome: str, kinds: tuple[str, ...] = ()) -> AuditEvent:
    side = GradedRun(backend="process", status="ok", passed=3, total=3)  # type: ignore[arg-type]
    return AuditEvent(
        **ids("g"), verdict_event_id="v1", worker="test:1", grader_version="g1", verdict=side,
        audit=side.model_copy(update={"backend": "docker"}), outcome=outcome, kinds=list(kinds),  # type: ignore[arg-type]
    )  # fmt: skip


def test_each_audit_and_each_disagreement_is_counted() -> None:
    registry = CollectorRegistry()
    metrics = AuditMetrics(registry)
    metrics.observe(event("agree"))
    metrics.observe(event("disagree", ("pass_flip", "passed_count")))
    metrics.observe(event("audit_sandbox_error"))
    metrics.skip("HumanEval/1", "no_code")

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    base = {"dataset": "HumanEval", "backend": "docker"}
    assert value("rewardstream_audits_total", **base, outcome="agree") == 1
    assert value("rewardstream_audits_total", **base, outcome="disagree") == 1
    assert value("rewardstream_audits_total", **base, outcome="audit_sandbox_error") == 1
    assert value("rewardstream_audit_disagreements_total", dataset="HumanEval", kind="pass_flip") == 1
    assert value("rewardstream_audit_disagreements_total", dataset="HumanEval", kind="run_status") is None
    assert value("rewardstream_audits_skipped_total", dataset="HumanEval", reason="no_code") == 1
