"""Image tasks for the sandbox tests: the sample Harbor task (tests.unit.workers.tasks.harbor.test_directory's),
with files written over it, and the tars an agent's WORKDIR is made of."""

from __future__ import annotations

import io
import os
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from schemas.tasks import Task, VerifierSuite
from tests.unit.workers.tasks.harbor.test_directory import make_task
from workers.tasks.harbor.directory import read_task_dir


def tar_of(files: dict[str, str | tuple[str, str]]) -> bytes:
    """A tar of ``files`` (name -> text, or name -> ("link", target))."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, body in files.items():
            info = tarfile.TarInfo(name)
            if isinstance(body, tuple):
                info.type, info.linkname = tarfile.SYMTYPE, body[1]
                tar.addfile(info)
            else:
                data = body.encode()
                info.size, info.mode = len(data), 0o755
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def hello(tmp_path: Path, files: dict[str, str] | None = None) -> Task:
    """The sample task, with ``files`` (path in the task directory -> text) written over it. Its image is this
    test process's own (a file naming the process is in its context): a module's teardown removes only it."""
    task_dir = make_task(tmp_path, f"hello-{uuid.uuid4().hex[:8]}")
    (task_dir / "environment" / "owner").write_text(f"{os.getpid()}\n")
    for relative, text in (files or {}).items():
        (task_dir / relative).write_text(text)
    return read_task_dir(task_dir).task


def verifier_of(task: Task) -> VerifierSuite:
    assert isinstance(task.hidden_tests, VerifierSuite)
    return task.hidden_tests


class CreatedContainers:
    """The ids of the containers made in this process while it is installed (docker-py's
    ``ContainerCollection.create`` wrapped: the real call, recorded), so a test checks its own are gone."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from docker.models.containers import ContainerCollection

        self.ids: list[str] = []
        original = ContainerCollection.create

        def create(collection: Any, *args: Any, **kwargs: Any) -> Any:
            container = original(collection, *args, **kwargs)
            self.ids.append(container.id)
            return container

        monkeypatch.setattr(ContainerCollection, "create", create)

    def left(self, client: Any) -> list[str]:
        """Those of them that still exist."""
        return [cid for cid in self.ids if _exists(client, cid)]


def _exists(client: Any, container_id: str) -> bool:
    try:
        client.containers.get(container_id)
    except Exception as exc:  # docker.errors.NotFound
        if type(exc).__name__ == "NotFound":
            return False
        raise
    return True
