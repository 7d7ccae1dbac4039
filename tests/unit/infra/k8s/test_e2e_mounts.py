"""The e2e's rule for what each role's pod may see of the task registry: the public part everywhere, the hidden part
in the verifier's and the auditor's pods only."""

from __future__ import annotations

from infra.k8s.e2e_mounts import Sight, problems

PUBLIC_ONLY = Sight(public=True, hidden=False)
WHOLE = Sight(public=True, hidden=True)


def test_the_chart_s_mounts_pass() -> None:
    assert problems({"executor": PUBLIC_ONLY, "episode": PUBLIC_ONLY, "verifier": WHOLE, "auditor": WHOLE}) == []


def test_a_role_that_sees_hidden_tests_it_does_not_grade_with_fails() -> None:
    assert problems({"executor": WHOLE, "verifier": WHOLE}) == [
        "executor: sees the hidden tests at /var/lib/rewardstream/tasks/hidden, which only auditor and verifier may"
    ]


def test_a_hidden_reader_without_them_or_a_role_without_the_public_part_fails() -> None:
    assert problems({"verifier": PUBLIC_ONLY, "gateway": Sight(public=False, hidden=False)}) == [
        "gateway: the tasks' public part is not mounted at /var/lib/rewardstream/tasks/public",
        "verifier: grades with hidden tests but has no /var/lib/rewardstream/tasks/hidden",
    ]
