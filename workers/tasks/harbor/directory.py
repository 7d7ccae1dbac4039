"""A Harbor task directory (``task.toml``, ``instruction.md``, ``environment/``, ``tests/``, ``solution/``) read
into one rewardstream ``Task``: the image task whose episodes run in a container built from ``environment/``
and whose reward its ``tests/test.sh`` writes.

Its directories travel packed (``PackedTree``), so a task is one registry entry whose version names every
byte of it; ``tests/`` and ``solution/`` go to its hidden part only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from schemas.codec import DecodeError, decode
from schemas.environments import MAX_CONTEXT_BYTES, MAX_FILES_BYTES, PackedTree
from schemas.errors import ValidationError
from schemas.tasks import MAX_PROMPT_CHARS, Task
from workers.episodes.snapshot import Caps, SnapshotError, pack
from workers.images.dockerfile import TaskImageError, dockerfile_bases, final_workdir
from workers.tasks.harbor.config import TaskConfig, TaskConfigError, parse_task_toml

TASK_TOML = "task.toml"
_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
#: Entries of one packed directory.
_MAX_ENTRIES = 5000
#: An episode's step may take at most this long (``EpisodeLimits.step_timeout_s``'s bound).
_MAX_STEP_S = 600.0
_MAX_TURNS = 1000
#: What an episode's changes to its container may hold (its delta: ``pip install``s, builds) and its WORKDIR.
_DELTA_MAX_MB = 256
_DELTA_MAX_FILES = 50_000


class HarborTaskError(ValueError):
    """A Harbor task directory cannot be loaded; ``problems`` names every reason."""

    def __init__(self, task_dir: Path, problems: list[str]) -> None:
        self.task_dir = task_dir
        self.problems = problems
        super().__init__(f"{task_dir}: {'; '.join(problems)}")


@dataclass(frozen=True, slots=True)
class HarborTask:
    """A task read from its directory, and what it loads with but should be told (e.g. network ignored)."""

    task: Task
    warnings: tuple[str, ...]


def is_harbor_task(path: Path) -> bool:
    """True when ``path`` is a Harbor task directory (it holds a ``task.toml``)."""
    return (path / TASK_TOML).is_file()


def task_dirs(root: Path) -> list[Path]:
    """The Harbor tasks under ``root``: ``root`` itself if it is one, else each subdirectory that is, sorted."""
    if is_harbor_task(root):
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and is_harbor_task(p))


def read_task_dir(task_dir: Path) -> HarborTask:
    """The task in ``task_dir`` (its id: the directory's name); HarborTaskError lists every problem."""
    problems: list[str] = []
    if not _TASK_ID.fullmatch(task_dir.name):
        problems.append(f"the directory name {task_dir.name!r} is not a task id (letters, digits, _ . : -)")
    try:
        config = parse_task_toml(_text(task_dir / TASK_TOML))
    except (TaskConfigError, _UnreadableError) as exc:
        problems.extend(exc.problems if isinstance(exc, TaskConfigError) else [str(exc)])
        config = None
    prompt = _required_text(task_dir / "instruction.md", MAX_PROMPT_CHARS, problems)
    environment = _environment(task_dir / "environment", config, problems)
    tests = _tree(task_dir / "tests", "test.sh", MAX_FILES_BYTES, problems, required=True)
    solution = _tree(task_dir / "solution", "solve.sh", MAX_FILES_BYTES, problems, required=False)
    if problems or config is None or tests is None:
        raise HarborTaskError(task_dir, problems)
    raw: dict[str, Any] = {
        "task_id": task_dir.name,
        "prompt": prompt,
        "environment": environment,
        "episode": _episode(config),
        "hidden_tests": {"kind": "verifier", "tests": tests, "env": config.verifier_env}
        | ({"timeout_s": config.verifier_timeout_s} if config.verifier_timeout_s else {}),
    }
    if solution is not None:
        raw["solution"] = {"solution": solution, "env": config.solution_env}
    try:
        task = decode(orjson.dumps(raw), Task)
    except DecodeError as exc:
        raise HarborTaskError(task_dir, [f"{path}: {problem}" for path, problem in exc.problems]) from None
    return HarborTask(task, config.warnings)


class _UnreadableError(Exception):
    """A file of the task cannot be read as text; the message says which and why."""


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _UnreadableError(f"{path.name} is missing") from None
    except UnicodeDecodeError:
        raise _UnreadableError(f"{path.name} is not UTF-8 text") from None
    except OSError as exc:
        raise _UnreadableError(f"{path.name} cannot be read: {exc.strerror or exc}") from None


def _required_text(path: Path, cap: int, problems: list[str]) -> str:
    try:
        text = _text(path)
    except _UnreadableError as exc:
        problems.append(str(exc))
        return ""
    if not text.strip():
        problems.append(f"{path.name} is empty")
    elif len(text) > cap:
        problems.append(f"{path.name} is {len(text)} characters, over the {cap}-character cap")
    return text


def _tree(path: Path, main: str, cap: int, problems: list[str], *, required: bool) -> dict[str, str] | None:
    """``path`` packed, with ``main`` at its root; None (and a problem if ``required``) when absent."""
    if not path.is_dir():
        if required:
            problems.append(f"{path.name}/ is missing (it must hold {main})")
        return None
    if not (path / main).is_file():
        problems.append(f"{path.name}/{main} is missing")
        return None
    try:
        packed = pack(path, Caps(max_bytes=cap, max_entries=_MAX_ENTRIES))
    except (SnapshotError, OSError) as exc:
        problems.append(f"{path.name}/: {exc}")
        return None
    if packed.dropped:
        problems.append(f"{path.name}/ holds entries that are not files, directories or links: {packed.dropped[0]}")
    if len(packed.data) > cap:
        problems.append(f"{path.name}/ is {len(packed.data)} bytes packed, over the {cap}-byte cap")
        return None
    tree = PackedTree.of(packed.data)
    return {"tar_b64": tree.tar_b64, "sha256": tree.sha256}


def _environment(path: Path, config: TaskConfig | None, problems: list[str]) -> dict[str, Any]:
    if (path / "docker-compose.yaml").exists() or (path / "docker-compose.yml").exists():
        problems.append("environment/docker-compose.yaml: multi-container tasks are not supported")
    has_dockerfile = (path / "Dockerfile").is_file()
    docker_image = config.docker_image if config else None
    if not has_dockerfile and docker_image is None:
        problems.append("environment/Dockerfile is missing (and task.toml names no docker_image)")
    out: dict[str, Any] = {}
    workdir = config.workdir if config else None
    if has_dockerfile:
        context = _tree(path, "Dockerfile", MAX_CONTEXT_BYTES, problems, required=True)
        if context is not None:
            out["context"] = context
        try:
            dockerfile = _text(path / "Dockerfile")
            dockerfile_bases(dockerfile)  # refused here, not at build time: a FROM that names nothing yet
            workdir = workdir or final_workdir(dockerfile)
        except (TaskImageError, _UnreadableError) as exc:
            problems.append(f"environment/Dockerfile: {exc}")
    if config is not None:
        optional = {"docker_image": docker_image, "cpus": config.cpus, "memory_mb": config.memory_mb,
                    "storage_mb": config.storage_mb, "build_timeout_s": config.build_timeout_s}  # fmt: skip
        out |= {key: value for key, value in optional.items() if value is not None}
        out["env"] = config.env
    if workdir is None and (has_dockerfile or docker_image is not None):
        problems.append(
            "no WORKDIR: set one in environment/Dockerfile (e.g. WORKDIR /app) or [environment] workdir in task.toml; "
            "it is where the agent works and all the verifier receives"
        )
    out["workdir"] = workdir
    return out


def _episode(config: TaskConfig) -> dict[str, Any]:
    """The episode's limits: ``[agent] timeout_sec`` bounds the episode (and so each of its steps); Harbor
    bounds an agent by time, not by turns, so the turns are many; its workspace caps bound what it changes in its
    container (``containers.delta``) and its final WORKDIR."""
    limits: dict[str, Any] = {"max_turns": _MAX_TURNS, "step_timeout_s": _MAX_STEP_S,
                              "workspace_max_mb": _DELTA_MAX_MB, "workspace_max_files": _DELTA_MAX_FILES}  # fmt: skip
    if config.agent_timeout_s is not None:
        limits |= {"episode_timeout_s": config.agent_timeout_s,
                   "step_timeout_s": min(_MAX_STEP_S, config.agent_timeout_s)}  # fmt: skip
    return limits


class TaskDirError(ValidationError):
    """Some task directories under a root cannot be loaded; ``problems`` names each (nothing was stored)."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{len(problems)} problem(s) in {source}, nothing stored; first: {problems[0]}")


def read_task_tree(root: Path) -> list[HarborTask]:
    """Every Harbor task under ``root`` (``task_dirs``), read whole; TaskDirError lists every problem of every
    task (``<task>: <problem>``), or says there is no task."""
    if not root.is_dir():
        raise TaskDirError(str(root), [f"{root} is not a directory"])
    found: list[HarborTask] = []
    problems: list[str] = []
    for task_dir in task_dirs(root):
        try:
            found.append(read_task_dir(task_dir))
        except HarborTaskError as exc:
            problems.extend(f"{task_dir.name}: {problem}" for problem in exc.problems)
    if not found and not problems:
        problems.append(f"no task directory (a subdirectory holding {TASK_TOML}) under {root}")
    if problems:
        raise TaskDirError(str(root), problems)
    return found
