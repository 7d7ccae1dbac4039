"""Hypothesis strategy of the audit event (apart from ``test_roundtrip``, which would outgrow its cap)."""

from __future__ import annotations

from typing import get_args

from hypothesis import strategies as st

from schemas.audits import AuditEvent, DifferingCase, DisagreementKind, GradedRun
from schemas.status import CompileFailure, SandboxStatus
from tests.unit.schemas.strategies import event, ids, short

_statuses = st.sampled_from(["passed", "failed", "error", "timeout", "missing"])
_runs = st.builds(
    GradedRun,
    backend=short,
    status=st.sampled_from([*SandboxStatus, *CompileFailure]),
    passed=st.integers(0, 100),
    total=st.integers(0, 100),
)


@st.composite
def audit_events(draw: st.DrawFn) -> AuditEvent:
    return AuditEvent(
        **{k: draw(v) for k, v in event.items()},
        turn=draw(st.integers(0, 10_000)),
        verdict_event_id=draw(ids),
        worker=draw(short),
        grader_version=draw(short),
        verdict=draw(_runs),
        audit=draw(_runs),
        outcome=draw(st.sampled_from(["agree", "disagree", "audit_sandbox_error"])),
        kinds=draw(st.lists(st.sampled_from(get_args(DisagreementKind)), max_size=4, unique=True)),
        differing_cases=draw(
            st.lists(
                st.builds(DifferingCase, case_id=ids, verdict=st.none() | _statuses, audit=st.none() | _statuses),
                max_size=4,
            )
        ),
        audit_error=draw(st.none() | st.text(max_size=30)),
    )
