"""The trainer's side of the e2e, through the CLI a user runs (``rewardstream tasks load``, ``submit``,
``episode play``), as subprocesses in the run's namespace (``RS_TOPIC_PREFIX``, its own task registry).

The CLI is the layer that wires the SDK; ``infra`` does not import it (the import-linter layers), so it runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson

from infra.k8s.e2e_workload import Episode, Solution
from schemas.caps import STDERR_TAIL_BYTES
from schemas.codec import encode
from schemas.errors import PlatformError
from schemas.tasks import Task

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class TrainerEnv:
    """Where the CLI runs: the run's topic prefix and partitions, its registry, its scratch dir."""

    topic_prefix: str
    partitions: int
    tasks_dir: Path
    scratch: Path
    run_id: str

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "RS_TOPIC_PREFIX": self.topic_prefix,
            "RS_TOPIC_PARTITIONS": str(self.partitions),
            "RS_TOPIC_REPLICATION_FACTOR": "1",
            "RS_TASKS_DIR": str(self.tasks_dir),
        }

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "rewardstream", *args]


def load_tasks(trainer: TrainerEnv, tasks: list[Task]) -> None:
    """``rewardstream tasks load`` into the run's registry (the pods mount it read-only)."""
    trainer.scratch.mkdir(parents=True, exist_ok=True)
    path = trainer.scratch / "tasks.jsonl"
    path.write_bytes(b"".join(encode(task) + b"\n" for task in tasks))
    argv = trainer.argv("tasks", "load", str(path), "--dir", str(trainer.tasks_dir), "--json")
    proc = subprocess.run(argv, env=trainer.env(), cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)
    if proc.returncode != 0:
        raise PlatformError(f"rewardstream tasks load failed: {proc.stderr.strip()[-STDERR_TAIL_BYTES:]}")


def start_submit(trainer: TrainerEnv, solutions: list[Solution], timeout_s: float) -> subprocess.Popen[bytes]:
    """``rewardstream submit`` of every solution, in the background (it waits for every reward itself)."""
    path = trainer.scratch / "solutions.jsonl"
    path.write_bytes(b"".join(orjson.dumps(s.as_row()) + b"\n" for s in solutions))
    argv = trainer.argv("submit", "--solutions", str(path), "--out", str(trainer.scratch / "rewards.jsonl"),
                        "--run-id", trainer.run_id, "--timeout", str(timeout_s))  # fmt: skip
    log = (trainer.scratch / "submit.log").open("wb")
    return subprocess.Popen(argv, env=trainer.env(), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def start_episode(trainer: TrainerEnv, episode: Episode, timeout_s: float) -> subprocess.Popen[bytes]:
    """``rewardstream episode play --json``: one JSON object per line, the first names the episode."""
    actions = trainer.scratch / f"episode-{episode.name}.jsonl"
    actions.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in episode.actions))
    argv = trainer.argv("episode", "play", "--task", episode.task_id, "--actions", str(actions), "--json",
                        "--run-id", trainer.run_id, "--timeout", str(timeout_s))  # fmt: skip
    out = (trainer.scratch / f"episode-{episode.name}.out").open("wb")
    err = (trainer.scratch / f"episode-{episode.name}.err").open("wb")
    return subprocess.Popen(argv, env=trainer.env(), cwd=ROOT, stdout=out, stderr=err)


def episode_id(trainer: TrainerEnv, episode: Episode) -> str | None:
    """The episode's id, from the first line ``episode play`` printed (None when it never opened)."""
    path = trainer.scratch / f"episode-{episode.name}.out"
    for line in path.read_bytes().splitlines() if path.exists() else []:
        found = orjson.loads(line).get("episode_id")
        if found:
            return str(found)
    return None


@contextmanager
def stopped_at_exit(procs: list[subprocess.Popen[bytes]]) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Whatever of ``procs`` still runs on the way out (a failed wait, an interrupt) is stopped by its pid:
    SIGTERM, then SIGKILL after 30 s."""
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def tail(path: Path, lines: int = 5) -> str:
    """The last lines of a log, for an error message."""
    if not path.exists():
        return ""
    return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
