"""Grading an episode's submit in real sandboxes and S3: the honest paths, docker, and a workspace at its caps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from schemas.tasks import Task
from tests.sandbox.episode_grading_env import Roles, assert_failed, assert_nothing_hidden_shown, raw_run
from tests.sandbox.swe_task import (
    FILES,
    HIDDEN_IDS,
    OPS_BUGGY,
    OPS_FIXED,
    snapshot,
    task,
)
from workers.episodes.originals import caps_of, original_snapshot
from workers.episodes.protect import graded_workspace
from workers.episodes.snapshot import pack
from workers.grading import Grader
from workers.roles.workspace import Graded
from workers.sandbox.api import Sandbox

pytestmark = pytest.mark.sandbox


# --------------------------------------------------------------------------------------------------------
# The honest paths


@pytest.mark.parametrize("kind", ["call", "io"])
def test_the_unfixed_workspace_earns_0(roles: Roles, kind: str) -> None:
    graded = roles.grade(kind, snapshot({}))
    assert_failed(graded)
    assert graded.verdict.passed == 0
    assert graded.verdict.suite_kind == kind
    ex = graded.execution
    assert ex.suite_kind is None, ex  # the public command is feedback, not cases
    assert ex.total == 0, ex
    assert "failed" in (ex.feedback or ""), ex
    assert "FAILED" in ex.stderr, ex  # unittest reports on stderr
    assert "public passed, hidden failed" not in graded.reward.reasons


@pytest.mark.parametrize("kind", ["call", "io"])
def test_a_genuine_fix_earns_1(roles: Roles, kind: str) -> None:
    graded = roles.grade(kind, snapshot({"calc/ops.py": OPS_FIXED}))
    verdict = graded.verdict
    assert verdict.run.status == "ok", verdict.run
    assert verdict.passed == verdict.total == (3 if kind == "call" else 2), verdict
    assert {c.case_id for c in verdict.cases} <= set(HIDDEN_IDS)
    assert graded.execution.run.status == "ok", graded.execution
    assert "exited 0" in (graded.execution.feedback or ""), graded.execution
    assert graded.judgement.status == "ok"
    assert graded.judgement.score is not None
    assert graded.reward.reward == 1.0, graded.reward
    assert_nothing_hidden_shown(graded)


def test_a_fix_whose_public_tests_fail_still_earns_1(roles: Roles) -> None:
    """The public command is never a gate: a workspace that fails a public test the hidden tests do not share
    is rewarded on the hidden tests alone (the agent can edit what the public command runs)."""
    doc = '"""The sum of a and b."""'
    odd = OPS_FIXED.replace(doc, doc + "\n    if (a, b) == (2, 2):\n        return 5")
    graded = roles.grade("call", snapshot({"calc/ops.py": odd}))
    assert "failed" in (graded.execution.feedback or ""), graded.execution
    assert graded.verdict.passed == graded.verdict.total
    assert graded.reward.reward == 1.0, graded.reward


def test_the_judge_reads_the_changed_python_files_and_survives_binary_and_huge_ones(roles: Roles) -> None:
    final = snapshot({
        "calc/ops.py": OPS_FIXED, "calc/blob.py": b"\xff\xfe\x00binary", "calc/huge.py": "x = 1\n" * 200_000,
        "data.bin": bytes(range(256)) * 64,
    })  # fmt: skip
    graded = roles.grade("call", final)
    assert graded.judgement.status == "ok", graded.judgement
    assert graded.judgement.score is not None
    assert graded.judgement.score > 0.5, graded.judgement
    assert graded.reward.reward == 1.0


@pytest.mark.parametrize("kind", ["call", "io"])
def test_on_docker_too_the_fix_passes_and_the_unfixed_fails(docker_sandbox: Sandbox, kind: str) -> None:
    """The workspace job is a plain harness run with files: every backend runs it unchanged."""
    task_ = task(kind)
    grader = Grader(docker_sandbox)
    for ops, passed in ((OPS_FIXED, True), (OPS_BUGGY, False)):
        ran = grader.run_suites(
            "", task_.entry_point, [("hidden", task_.graded_suite)], task_.limits,
            workspace=raw_run(snapshot({"calc/ops.py": ops})).job(),
        )  # fmt: skip
        assert ran.infra_error is None, ran.run
        assert ran.outcomes[0].all_passed is passed, ran.outcomes[0]


def test_a_workspace_at_its_caps_is_graded_never_the_infrastructures_fault(
    process_sandbox: Sandbox, tmp_path: Path
) -> None:
    """An agent that fills its workspace to the default caps (64 MiB, 5000 entries) is still graded (a
    sandbox_error would withhold its 0): the run's work dir holds the tar and the restored files."""
    base = task("call").model_dump(by_alias=True, mode="json")
    big_task = Task.model_validate({**base, "episode": {}, "limits": {"timeout_s": 5, "memory_mb": 512}})
    caps = caps_of(big_task.episode_limits)
    root = tmp_path / "w"
    for name, text in {**FILES, "calc/ops.py": OPS_FIXED}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    blob = os.urandom(12_500)
    for i in range(caps.max_entries - len(FILES) - 60):
        (root / "fill" / f"d{i % 50}").mkdir(parents=True, exist_ok=True)
        (root / "fill" / f"d{i % 50}" / f"f{i}").write_bytes(blob)
    final = pack(root, caps)
    assert final.bytes > 55 << 20, final.bytes
    workspace = big_task.workspace
    assert workspace is not None
    original = original_snapshot(workspace, caps, lambda _url: b"").data
    graded = graded_workspace(final.data, original, big_task.protected, caps)
    ran = Grader(process_sandbox).run_suites(
        "", big_task.entry_point, [("hidden", big_task.graded_suite)], big_task.limits,
        workspace=Graded(graded, original).job(),
    )  # fmt: skip
    assert ran.infra_error is None, ran.run
    assert ran.outcomes[0].all_passed, ran.outcomes[0]
