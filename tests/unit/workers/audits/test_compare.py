"""A verdict against its audit: agreement, each kind of disagreement, and the audit's host failures apart."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from schemas.audits import GradedRun
from schemas.events import HiddenCaseResult, HiddenVerdict
from tests.unit.reward_events import verdict
from workers.audits.compare import (
    IMAGE_TASK,
    NO_CODE,
    VERDICT_SANDBOX_ERROR,
    compare,
    skip_reason,
    verdict_run,
)


def cases(passed: int, total: int) -> list[HiddenCaseResult]:
    return [HiddenCaseResult(case_id=f"h{i}", status="passed" if i < passed else "failed") for i in range(total)]


def audit(passed: int, total: int = 3, status: str = "ok") -> GradedRun:
    return GradedRun(backend="docker", status=status, passed=passed, total=total)  # type: ignore[arg-type]


def test_the_same_statuses_agree() -> None:
    found = compare(verdict("g"), audit(3), cases(3, 3), audit_failed=False)
    assert (found.outcome, found.kinds, found.differing) == ("agree", (), ())


def test_a_forged_pass_is_a_pass_flip() -> None:
    """The verdict says 3/3; the code really passes 1: the disagreement a reward would see."""
    found = compare(verdict("g", passed=3), audit(1), cases(1, 3), audit_failed=False)
    assert found.outcome == "disagree"
    assert found.kinds == ("pass_flip", "passed_count")
    assert [(c.case_id, c.verdict, c.audit) for c in found.differing] == [
        ("h1", "passed", "failed"),
        ("h2", "passed", "failed"),
    ]


def test_the_same_count_on_other_cases_is_a_case_status_disagreement() -> None:
    swapped = [HiddenCaseResult(case_id="h0", status="failed"), HiddenCaseResult(case_id="h1", status="passed"),
               HiddenCaseResult(case_id="h2", status="failed")]  # fmt: skip
    found = compare(verdict("g", passed=1), audit(1), swapped, audit_failed=False)
    assert found.kinds == ("case_status",)


def test_a_run_ending_otherwise_is_a_run_status_disagreement() -> None:
    found = compare(verdict("g", passed=0), audit(0, status="timeout"), cases(0, 3), audit_failed=False)
    assert found.kinds == ("run_status",)


def test_a_case_only_the_audit_has_is_listed() -> None:
    found = compare(verdict("g", passed=2, total=2), audit(3), cases(3, 3), audit_failed=False)
    assert "passed_count" in found.kinds
    assert [(c.case_id, c.verdict, c.audit) for c in found.differing] == [("h2", None, "passed")]


def test_the_audits_host_failure_is_never_a_disagreement() -> None:
    assert compare(verdict("g"), audit(0, status="sandbox_error"), [], audit_failed=False).outcome == (
        "audit_sandbox_error"
    )
    assert compare(verdict("g"), audit(0), [], audit_failed=True).kinds == ()


def test_what_cannot_be_audited_says_why() -> None:
    assert skip_reason(verdict("g", status="sandbox_error")) == VERDICT_SANDBOX_ERROR
    assert skip_reason(verdict("g")) == NO_CODE
    stored = verdict("g").model_copy(update={"artifacts": {"code": "s3://b/sha256/aa/" + "a" * 64}})
    assert skip_reason(stored) is None
    image = stored.model_copy(update={"suite_kind": "verifier"})
    assert skip_reason(image) == IMAGE_TASK


def test_the_verdicts_side_is_its_own_run() -> None:
    side = verdict_run(verdict("g", passed=2))
    assert (side.backend, side.status, side.passed, side.total) == ("process", "ok", 2, 3)


statuses = st.lists(st.sampled_from(["passed", "failed", "error", "timeout", "missing"]), min_size=1, max_size=8)


def graded(found: list[str]) -> tuple[GradedRun, list[HiddenCaseResult]]:
    cases = [HiddenCaseResult(case_id=f"h{i}", status=s) for i, s in enumerate(found)]  # type: ignore[arg-type]
    return audit(sum(s == "passed" for s in found), len(found)), cases


def claimed(found: list[str]) -> HiddenVerdict:
    side, cases = graded(found)
    return verdict("g", passed=side.passed, total=side.total).model_copy(update={"cases": cases})


@given(statuses)
def test_the_same_statuses_always_agree(found: list[str]) -> None:
    side, cases = graded(found)
    assert compare(claimed(found), side, cases, audit_failed=False).outcome == "agree"


@given(statuses, statuses)
def test_a_disagreement_is_exactly_a_difference_and_lists_every_differing_case(said: list[str], ran: list[str]) -> None:
    ran = (ran * len(said))[: len(said)]  # the same case ids on both sides
    side, cases = graded(ran)
    found = compare(claimed(said), side, cases, audit_failed=False)
    assert (found.outcome == "disagree") == (said != ran)
    differing = [f"h{i}" for i, (a, b) in enumerate(zip(said, ran, strict=True)) if a != b]
    assert [c.case_id for c in found.differing] == differing
    said_all, ran_all = all(s == "passed" for s in said), all(s == "passed" for s in ran)
    assert ("pass_flip" in found.kinds) == (said_all != ran_all)
