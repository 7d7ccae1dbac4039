"""What one shipped Harbor task is made of, and how its directory is written.

A task is its buggy project (committed on ``main``, the image's HEAD), the fixed files (committed on a branch and
tagged, so the history holds the answer until the image build keeps HEAD's history alone), its graded cases and
its instruction. The repository is made by the host's ``git`` with fixed names and dates, so the same task is the
same bytes (its image is addressed by its context's content) every time it is written on a host.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from schemas.errors import ValidationError

#: The first lines of every task's Dockerfile, per base: docker's layer cache makes the ``apt-get`` layer once
#: per host and base, whatever the task. Every image needs ``git`` (its WORKDIR is a repository).
PYTHON_BASE = (
    "FROM python:3.11-slim\n"
    "RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*\n"
)
C_BASE = (
    "FROM debian:bookworm-slim\n"
    "RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev git "
    "&& rm -rf /var/lib/apt/lists/*\n"
)
WORKDIR = "/app"
LOGS_REWARD = "/logs/verifier/reward.txt"
#: The repository's index holds each file's inode and times, which no two writes share: it is left out and
#: rebuilt from HEAD in the image, so the context stays the same bytes.
_REBUILD_INDEX = f"WORKDIR {WORKDIR}\nCOPY app/ {WORKDIR}/\nRUN git reset -q\n"
_GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Ada Maintainer",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada Maintainer",
    "GIT_COMMITTER_EMAIL": "ada@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}
_DATES = ("2026-01-05T10:00:00+00:00", "2026-01-12T10:00:00+00:00", "2026-01-19T10:00:00+00:00")
TASK_TOML = (
    "[metadata]\n"
    'author_name = "rewardstream"\n'
    'difficulty = "easy"\n'
    'category = "debugging"\n'
    "\n"
    "[agent]\n"
    "timeout_sec = 600.0\n"
    "\n"
    "[verifier]\n"
    "timeout_sec = 120.0\n"
    "\n"
    "[environment]\n"
    "build_timeout_sec = 600.0\n"
    "cpus = 1\n"
    "memory_mb = 1024\n"
    "storage_mb = 2048\n"
)


@dataclass(frozen=True)
class ExampleTask:
    """One shipped task: ``base`` is the project as first committed, ``buggy`` the files of the commit that
    added the bug (HEAD; neither holds the fix), ``fixed`` the same files repaired (on branch ``fix_branch``,
    tagged ``fix_tag``: gone from the image). ``test_sh`` and ``test_files`` are its verifier; ``solve_sh`` its
    oracle."""

    name: str
    language: str
    instruction: str
    base: dict[str, str]
    buggy: dict[str, str]
    fixed: dict[str, str]
    test_sh: str
    test_files: dict[str, str]
    solve_sh: str
    fix_branch: str
    fix_tag: str
    fix_message: str
    bug_message: str

    @property
    def dockerfile(self) -> str:
        return (PYTHON_BASE if self.language == "python" else C_BASE) + _REBUILD_INDEX


def write_task(spec: ExampleTask, dest: Path) -> Path:
    """Write ``spec`` as the Harbor task directory ``dest/<name>`` (replaced if present); its path."""
    task = dest / spec.name
    if task.exists():
        shutil.rmtree(task)
    _write(task / "task.toml", TASK_TOML)
    _write(task / "instruction.md", spec.instruction)
    _write(task / "environment" / "Dockerfile", spec.dockerfile)
    _repository(spec, task / "environment" / "app")
    _write(task / "tests" / "test.sh", spec.test_sh, executable=True)
    for relative, text in spec.test_files.items():
        _write(task / "tests" / relative, text)
    _write(task / "solution" / "solve.sh", spec.solve_sh, executable=True)
    return task


def _write(path: Path, text: str, *, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755 if executable else 0o644)


def _repository(spec: ExampleTask, app: Path) -> None:
    """``main``: the base commit, then the buggy one (checked out); ``fix_branch`` (and ``fix_tag``): the fix."""
    app.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="rs-examples-home-") as home:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LC_ALL": "C", **_GIT_IDENTITY}

        def git(*args: str, date: str = _DATES[0]) -> None:
            dated = {**env, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
            _run_git(["git", "-c", "gc.auto=0", "-c", "commit.gpgsign=false", *args], app, dated)

        git("init", "-q", "--template=", "-b", "main")
        _files(app, spec.base)
        git("add", "-A")
        git("commit", "-q", "-m", f"Add {spec.name}")
        _files(app, spec.buggy)
        git("add", "-A", date=_DATES[1])
        git("commit", "-q", "-m", spec.bug_message, date=_DATES[1])
        git("checkout", "-q", "-b", spec.fix_branch, date=_DATES[2])
        _files(app, spec.fixed)
        git("add", "-A", date=_DATES[2])
        git("commit", "-q", "-m", spec.fix_message, date=_DATES[2])
        git("tag", spec.fix_tag, date=_DATES[2])
        git("checkout", "-q", "main", date=_DATES[2])
    (app / ".git" / "index").unlink()


def _files(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        _write(root / relative, text)


def _run_git(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    try:
        subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise ValidationError("the shipped tasks' repositories are made with git: install git on this host") from None
    except subprocess.CalledProcessError as exc:
        raise ValidationError(f"git {' '.join(argv[5:])} failed in {cwd}: {exc.stderr.strip()}") from None


def solution_script(files: dict[str, str]) -> str:
    """A ``solve.sh`` that writes ``files`` (the fix) into WORKDIR: the oracle never reads the history."""
    lines = ["#!/bin/bash", "set -euo pipefail", f"cd {WORKDIR}"]
    for relative, text in files.items():
        marker = "RS_FIXED_FILE_END"
        if marker in text:
            raise ValueError(f"{relative} holds the heredoc marker {marker}")
        lines += [f"cat > '{relative}' <<'{marker}'", text.rstrip("\n"), marker]
    return "\n".join(lines) + "\n"
