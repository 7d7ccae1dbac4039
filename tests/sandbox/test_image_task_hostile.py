"""Hostile verifier runs of an image task on both backends (disk, fork bomb, kill -1, memory): each ends in a 0
with its reason and leaves no container. Run alone (make test's measuring part): a fork bomb loads the host for
seconds, which must not bend another test's timing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.image_task import CreatedContainers, hello, verifier_of


@pytest.mark.parametrize(
    "case",
    [
        # Disk: docker has no quota on overlay2 here, so the cap is watched and the writer killed; an overlay's
        # upper directory is a tmpfs of that size, so the writer fails and the tests write nothing.
        ("rs-as-agent dd if=/dev/zero of=/app/big bs=1M count=2000 2>/dev/null", {"storage_mb": 64}, "wrote"),
        # A fork bomb meets the pids limit; the verifier's timeout ends it.
        ("rs-as-agent bash -c ':(){ :|:& };:' ; sleep 600", {}, "past its timeout"),
        # Every process root can signal in the container: test.sh dies with them, having written nothing.
        ("kill -9 -1; sleep 5; echo 1 > /logs/verifier/reward.txt", {}, "neither reward.json nor reward.txt"),
        # Memory: the kernel kills the allocation; the tests go on and write the 0.
        (
            "rs-as-agent python3 -c 'x = bytearray(1 << 30)' || echo 0 > /logs/verifier/reward.txt",
            {"memory_mb": 128},
            None,
        ),
    ],
    ids=["disk", "fork-bomb", "kill-all", "memory"],
)
def test_hostile_verifier_runs_end_in_a_zero_and_leave_nothing(  # noqa: PLR0917 - fixtures
    verifying: Any,
    docker_client: Any,
    image_of: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: tuple[str, dict[str, int], str | None],
) -> None:
    script, limits, reason = case
    created = CreatedContainers(monkeypatch)
    task = hello(tmp_path, {"tests/test.sh": f"#!/bin/bash\n{script}\n"})
    assert task.environment is not None
    environment = task.environment.model_copy(update=limits)
    verifier = verifier_of(task).model_copy(update={"timeout_s": 8.0})
    got = verifying(image_of(task), environment, verifier, None)
    assert got.reward.reward == 0.0
    if reason is not None:
        assert reason in (got.reward.reason or ""), got
    assert got.seconds < 60
    assert created.ids or got.backend == "process"  # an overlay makes a container only to unpack a new image
    assert created.left(docker_client) == []
