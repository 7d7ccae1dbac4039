"""A verifier on a host without a docker daemon: told at start, and given why, so that each image task's verdict
is a sandbox_error naming it (withheld, never a 0). A host that cannot make overlays says so and runs image tasks
(and ``tasks validate``) in containers."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewardstream.cli.task_images import image_task_host, overlay_host
from schemas.settings import Settings
from workers.containers.task_host import NoImageTaskHost
from workers.sandbox.fork_server import HOST_ENV


def test_no_daemon_is_said_and_kept_as_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RS_DOCKER_HOST", f"unix://{tmp_path}/no-dockerd.sock")
    host = image_task_host(Settings())
    assert isinstance(host, NoImageTaskHost)
    assert "no-dockerd.sock" in host.reason
    assert "image tasks run on a docker daemon" in host.reason
    assert capsys.readouterr().err.startswith("verifier: warning: docker daemon unreachable")


def test_overlays_only_on_the_process_backend_and_a_host_without_bwrap_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RS_SANDBOX_BACKEND", "docker")
    assert overlay_host(Settings(), None, "tasks validate") is None
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("RS_SANDBOX_BACKEND", "process")
    monkeypatch.setitem(HOST_ENV, "PATH", str(tmp_path))  # no bwrap, no nsenter there
    assert overlay_host(Settings(), None, "tasks validate") is None
    said = capsys.readouterr().err
    assert said.startswith("tasks validate: warning: image tasks run in containers: ")
    assert "need bwrap" in said
