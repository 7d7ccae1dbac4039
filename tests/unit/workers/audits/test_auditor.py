"""The auditor's handler without Kafka: what it skips and why, what it records, and that it counts only once
the transaction holding the audit committed."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from schemas.audits import AuditEvent
from schemas.codec import decode
from schemas.events import HiddenVerdict
from tests.unit.reward_events import verdict
from tests.unit.workers.roles.test_roles import BrokenSandbox, task
from workers.audits.auditor import AuditContext, AuditHandler
from workers.audits.metrics import AuditMetrics
from workers.grading import Grader, GraderConfig
from workers.handler import Done, Source
from workers.roles.common import TaskSource
from workers.tasks.registry import TaskRegistry

SOURCE = Source("rs.verdicts", 0, 7)
CODE_URL = "s3://b/sha256/aa/" + "a" * 64


class Codes:
    """The artifact store's reads: every URL holds the same program."""

    def get(self, url: str, *, max_bytes: int | None = None) -> bytes:
        return b"def inc(x):\n    return x + 1\n"


def handler(
    tmp_path: Path, *, rate: float = 1.0, backends: tuple[str, ...] = ("docker",)
) -> tuple[AuditHandler, CollectorRegistry]:
    """A handler over task T/1 (whose code is always ``inc``), its graders' every run a host failure, and the
    registry of its counters."""
    registry = TaskRegistry(tmp_path / "tasks")
    registry.store([task()])
    graders = {b: Grader(BrokenSandbox(), GraderConfig(attempts=1, backoff_s=0.0), sleep=lambda _s: None)
               for b in backends}  # fmt: skip
    metrics = CollectorRegistry()
    context = AuditContext(worker="host:1", tasks=TaskSource(registry), artifacts=Codes(), graders=graders,
                           output_topic="rs.audits", rate=rate, metrics=AuditMetrics(metrics))  # fmt: skip
    return AuditHandler(context), metrics


def stored(**update: object) -> HiddenVerdict:
    return verdict("g1", passed=2, total=2).model_copy(update={"task_id": "T/1", "artifacts": {"code": CODE_URL},
                                                               **update})  # fmt: skip


def test_a_verdict_outside_the_sample_is_left_alone(tmp_path: Path) -> None:
    done = handler(tmp_path, rate=0.0)[0].handle(stored(), SOURCE)
    assert isinstance(done, Done)
    assert (done.outputs, done.status, done.committed) == ((), "not_sampled", None)


def test_what_cannot_be_re_graded_is_counted_as_skipped_once_committed(tmp_path: Path) -> None:
    cases = {
        "no_code": stored(artifacts={}),
        "verdict_sandbox_error": verdict("g1", status="sandbox_error"),
        "unknown_backend": stored(run=stored().run.model_copy(update={"backend": "vm"})),
        "backend_unavailable": stored(run=stored().run.model_copy(update={"backend": "docker"})),
    }
    audit, metrics = handler(tmp_path)  # it has a docker grader only: a docker verdict has no other backend here
    for reason, skipped in cases.items():
        done = audit.handle(skipped, SOURCE)
        assert isinstance(done, Done)
        assert (done.outputs, done.status) == ((), "skipped"), reason
        labels = {"dataset": skipped.task_id.split("/")[0], "reason": reason}
        assert metrics.get_sample_value("rewardstream_audits_skipped_total", labels) is None  # not yet committed
        assert done.committed is not None
        done.committed()
        assert metrics.get_sample_value("rewardstream_audits_skipped_total", labels) == 1, reason


def test_the_audits_host_failure_is_recorded_apart_never_as_a_disagreement(tmp_path: Path) -> None:
    (audit, metrics), audited = handler(tmp_path), stored()
    done = audit.handle(audited, SOURCE)  # a process verdict: audited on docker, whose host fails
    assert isinstance(done, Done)
    assert done.status == "sandbox_error"
    event = decode(done.outputs[0].value or b"", AuditEvent)
    assert (done.outputs[0].topic, done.outputs[0].key) == ("rs.audits", b"g1")
    assert (event.outcome, event.kinds, event.verdict_event_id) == ("audit_sandbox_error", [], audited.event_id)
    assert event.audit_error is not None
    assert done.committed is not None
    done.committed()
    failed = {"dataset": "T", "backend": "process", "outcome": "audit_sandbox_error"}  # the run's own backend field
    assert metrics.get_sample_value("rewardstream_audits_total", failed) == 1
    assert (
        metrics.get_sample_value("rewardstream_audit_disagreements_total", {"dataset": "T", "kind": "pass_flip"})
        is None
    )
