"""The trimming step's build context and what its output says (its effect on a real repository is shown on
docker in tests/sandbox/test_image_tasks.py)."""

from __future__ import annotations

import io
import tarfile

from workers.images.trim_git import MARK, SCRIPT, trim_context, trimmed_refs


def files(context: bytes) -> dict[str, str]:
    with tarfile.open(fileobj=io.BytesIO(context)) as tar:
        out = {}
        for member in tar.getmembers():
            source = tar.extractfile(member)
            assert source is not None
            out[member.name] = source.read().decode()
        return out


def test_the_step_runs_as_root_over_the_quoted_workdir_and_restores_the_user() -> None:
    context = files(trim_context("sha256:" + "a" * 64, "/srv/my app/$(id)", "agent"))
    assert context["rs-trim-git.sh"] == SCRIPT
    lines = context["Dockerfile"].splitlines()
    assert lines[0] == "FROM sha256:" + "a" * 64
    assert lines[1] == "USER root"
    assert "sh /rs-trim-git.sh '/srv/my app/$(id)' && rm -f /rs-trim-git.sh" in lines[3]
    assert lines[-1] == "USER agent"
    assert "USER" not in files(trim_context("x", "/app", ""))["Dockerfile"].split("USER root", 1)[1]


def test_the_refs_removed_are_read_from_the_output() -> None:
    lines = ["Step 3/4 : RUN sh /rs-trim-git.sh /app", f"{MARK} /app: refs/heads/fix", f" {MARK} /app: refs/stash "]
    assert trimmed_refs(lines) == ["/app: refs/heads/fix", "/app: refs/stash"]
