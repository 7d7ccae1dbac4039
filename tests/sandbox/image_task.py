"""Image tasks for the sandbox tests: the sample Harbor task (tests.unit.workers.tasks.harbor.test_directory's),
with files written over it, and the tars an agent's WORKDIR is made of."""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path

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
    """The sample task, with ``files`` (path in the task directory -> text) written over it."""
    task_dir = make_task(tmp_path, f"hello-{uuid.uuid4().hex[:8]}")
    for relative, text in (files or {}).items():
        (task_dir / relative).write_text(text)
    return read_task_dir(task_dir).task


def verifier_of(task: Task) -> VerifierSuite:
    assert isinstance(task.hidden_tests, VerifierSuite)
    return task.hidden_tests
