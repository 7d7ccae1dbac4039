"""A verifier on a host without a docker daemon: told at start, and given why, so that each image task's verdict
is a sandbox_error naming it (withheld, never a 0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewardstream.cli.task_images import image_task_host
from schemas.settings import Settings
from workers.containers.task_host import NoImageTaskHost


def test_no_daemon_is_said_and_kept_as_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RS_DOCKER_HOST", f"unix://{tmp_path}/no-dockerd.sock")
    host = image_task_host(Settings())
    assert isinstance(host, NoImageTaskHost)
    assert "no-dockerd.sock" in host.reason
    assert "image tasks run on a docker daemon" in host.reason
    assert capsys.readouterr().err.startswith("verifier: warning: docker daemon unreachable")
