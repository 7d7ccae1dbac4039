"""The mini-swe-agent environment's side of the protocol: a command is one exec step whose observation reads as
mini-swe-agent's own environments report it, the finishing command submits once and ends the agent with the
reward, and the module imports without mini-swe-agent. (The agent loop against the real pipeline:
tests/integration/test_mini_swe_agent.py.)"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import Future
from typing import Any

import pytest

from schemas.episodes import ObservationEvent
from schemas.events import RewardEvent
from schemas.status import SandboxStatus
from streams.sdk.mini_swe_env import FINISH_MARKER, MiniSweEpisodeEnvironment, output_of

Submitted = pytest.importorskip("minisweagent.exceptions").Submitted


def _obs(turn: int, **fields: Any) -> ObservationEvent:
    return ObservationEvent.build(episode_id="ep-1", turn=turn, action="exec", **fields)


def _reward(value: float) -> RewardEvent:
    return RewardEvent(generation_id="ep-1", episode_id="ep-1", run_id="r", task_id="hello", reward=value,
                       policy_name="default", policy_version="2", valid=True)  # fmt: skip


class _Episode:
    """An episode stand-in that answers each exec with the next queued observation and counts submits."""

    episode_id = "ep-1"

    def __init__(self, *answers: ObservationEvent) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[str, float | None]] = []
        self.submits = 0

    def exec(self, command: str, timeout_s: float | None = None) -> ObservationEvent:
        self.sent.append((command, timeout_s))
        return self.answers.pop(0)

    def submit(self, timeout_s: float = 600.0) -> RewardEvent:
        self.submits += 1
        return _reward(1.0)

    def reward_future(self) -> Future[RewardEvent]:
        done: Future[RewardEvent] = Future()
        done.set_result(_reward(0.0))
        return done


class _Client:
    def __init__(self, episode: _Episode) -> None:
        self.episode = episode

    def open(self, task_id: str) -> _Episode:
        assert task_id == "hello"
        return self.episode


def _env(*answers: ObservationEvent, **kwargs: Any) -> tuple[MiniSweEpisodeEnvironment, _Episode]:
    episode = _Episode(*answers)
    return MiniSweEpisodeEnvironment(_Client(episode), "hello", **kwargs), episode  # type: ignore[arg-type]


def test_an_observation_reads_as_output_and_returncode_and_a_timeout_as_an_exception() -> None:
    ok = output_of(_obs(1, status=SandboxStatus.OK, exit_code=0, stdout="out\n", stderr="err\n"))
    assert ok == {"output": "out\nerr\n", "returncode": 0, "exception_info": ""}
    failed = output_of(_obs(1, status=SandboxStatus.NONZERO_EXIT, exit_code=3, stdout="x"))
    assert (failed["returncode"], failed["exception_info"]) == (3, "")
    slow = output_of(_obs(1, status=SandboxStatus.TIMEOUT, stdout="partial"))
    assert (slow["output"], slow["returncode"]) == ("partial", -1)
    assert slow["exception_info"].startswith("An error occurred while executing the command: timeout")


def test_a_command_is_one_exec_step_in_the_cwd_asked_for_with_its_timeout() -> None:
    env, episode = _env(*(_obs(t, status=SandboxStatus.OK, exit_code=0) for t in (1, 2)), timeout=7)
    env.execute({"command": "ls"})
    env.execute({"command": "ls"}, cwd="/app/sub dir", timeout=3)
    assert episode.sent == [("ls", 7.0), ("cd '/app/sub dir' && ls", 3.0)]
    assert env.get_template_vars()["episode_id"] == "ep-1"


def test_the_finishing_command_submits_once_and_ends_the_agent_with_the_reward() -> None:
    env, episode = _env(_obs(1, status=SandboxStatus.OK, exit_code=0, stdout=f"{FINISH_MARKER}\ndone\n"))
    with pytest.raises(Submitted) as ended:
        env.execute({"command": f"echo {FINISH_MARKER}; echo done"})
    assert ended.value.messages[0]["extra"] == {"exit_status": "Submitted", "submission": "done\n",
                                                     "reward": 1.0, "episode_id": "ep-1"}  # fmt: skip
    assert env.submit().reward == 1.0
    assert episode.submits == 1
    assert env.serialize()["info"]["reward"]["reward"] == 1.0


def test_a_step_the_worker_ends_the_episode_on_ends_the_agent_with_the_graded_reward() -> None:
    env, episode = _env(_obs(1, status=SandboxStatus.OK, exit_code=0, ended="max_turns"))
    with pytest.raises(Submitted) as ended:
        env.execute({"command": "ls"})
    assert (ended.value.messages[0]["extra"]["exit_status"], env.submit().reward) == ("max_turns", 0.0)
    assert episode.submits == 0


def test_the_module_imports_without_mini_swe_agent() -> None:
    code = "import sys; sys.modules['minisweagent'] = None; import streams.sdk.mini_swe_env"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
