"""What the episode-worker tests share: the workspace tasks, actions and one worker environment."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas.codec import decode, encode
from schemas.episodes import ActionEvent, ObservationEvent
from schemas.events import DeadLetter, GenerationEvent
from schemas.tasks import Task
from tests.integration.workers_pipeline_env import Reader, publish

TASK_ID = "swe/calc-1"
SHORT_TASK_ID = "swe/calc-short"  # max_turns 3: the worker ends it by itself
IDLE_TASK_ID = "swe/calc-idle"  # idle_timeout_s 3: abandoned when its trainer goes quiet
LATE_TASK_ID = "swe/calc-late"  # episode_timeout_s 6: submitted as it is when its time is up


def workspace_task(task_id: str, max_turns: int, **episode: float) -> Task:
    limits = {"max_turns": max_turns, "step_timeout_s": 5, "episode_timeout_s": 600, "idle_timeout_s": 300,
              "workspace_max_mb": 4, "workspace_max_files": 200, **episode}  # fmt: skip
    return Task.model_validate({
        "schema": "rewardstream.task/v1", "task_id": task_id, "prompt": "Fix add.", "entry_point": "calc.ops:add",
        "workspace": {"files": {"calc/__init__.py": "", "calc/ops.py": "def add(a, b):\n    return a - b\n",
                                "tests/test_ops.py": "from calc.ops import add\n\ndef test_add():\n"
                                                     "    assert add(1, 2) == 3\n"}},
        "episode": limits,
        "protected": ["tests/**"],
        "public_tests": {"kind": "command", "command": "python -m pytest -q tests"},
        "hidden_tests": {"kind": "call", "cases": [{"id": "h0", "args": [1, 2], "expected": 3}]},
        "limits": {"timeout_s": 10, "memory_mb": 256},
    })  # fmt: skip


def action(episode: str, turn: int, body: dict[str, Any]) -> ActionEvent:
    return ActionEvent.model_validate({"episode_id": episode, "turn": turn, "action": body})


def open_action(episode: str, task_id: str = TASK_ID) -> ActionEvent:
    return action(episode, 0, {"action": "open", "task_id": task_id, "run_id": "run-7", "policy_version": "step-3"})


@dataclass
class EpisodeEnv:
    """One worker environment: its topics, a reader of what it committed, the worker processes started."""

    prefix: str
    kafka_config: dict[str, str]
    env: dict[str, str]
    logs_dir: Path
    topics: dict[str, str]
    reader: Reader
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def spawn(self, name: str) -> subprocess.Popen[bytes]:
        """``rewardstream worker episode`` as a process (the same instance id each time: a restart fences the
        killed one's transaction at once)."""
        with (self.logs_dir / f"{name}.log").open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "rewardstream", "worker", "episode", "--concurrency", "2"],
                env=self.env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.procs.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-4000:] for p in sorted(self.logs_dir.glob("*.log")))

    def send(self, actions: list[ActionEvent]) -> None:
        publish(self.kafka_config, self.topics["actions"], [(a.key(), encode(a)) for a in actions])

    def observations(self) -> dict[str, list[ObservationEvent]]:
        found: dict[str, list[ObservationEvent]] = defaultdict(list)
        for msg in self.reader.messages[self.topics["observations"]]:
            obs = decode(msg.value() or b"", ObservationEvent)
            found[obs.episode_id].append(obs)
        return found

    def generations(self) -> list[GenerationEvent]:
        return [decode(m.value() or b"", GenerationEvent) for m in self.reader.messages[self.topics["generations"]]]

    def dead_letters(self) -> list[DeadLetter]:
        return [decode(m.value() or b"", DeadLetter) for m in self.reader.messages[self.topics["dlq"]]]

    def wait(self, done: Callable[[], bool], timeout_s: float, what: Callable[[], str]) -> None:
        self.reader.poll_until(done, timeout_s, lambda: f"{what()}\n{self.logs()}")

    def wait_turns(self, wanted: dict[str, int], timeout_s: float) -> None:
        """Until every episode has observations up to its wanted turn."""

        def behind() -> dict[str, int]:
            seen = self.observations()
            return {e: max((o.turn for o in seen.get(e, [])), default=-1) for e, t in wanted.items()
                    if max((o.turn for o in seen.get(e, [])), default=-1) < t}  # fmt: skip

        self.wait(lambda: not behind(), timeout_s, lambda: f"episodes behind: {behind()}")

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, self.logs()


def appending_step(episode: str, turn: int) -> ActionEvent:
    """Each turn appends its number and prints the whole file: a step applied twice, or on anything but the
    last committed workspace, prints another file."""
    return action(episode, turn, {"action": "exec", "command": f"echo {turn} >> log.txt && cat log.txt"})
