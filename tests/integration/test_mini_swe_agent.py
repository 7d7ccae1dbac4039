"""mini-swe-agent's own agent loop as a rewardstream client: its ``DefaultAgent`` with a scripted model (its
``DeterministicModel``, no LLM) plays the sample image task (``tests/sandbox/image_task.hello``; no Harbor
task ships yet) through the whole pipeline of ``test_image_episodes``: each command one exec step in a fresh
container of the task image, the finishing command the submit, the verifier's reward the agent's result.
The agent that fixes hello.py earns 1.0; the one that looks and gives up earns 0.0.
"""

from __future__ import annotations

from typing import Any

import pytest

from schemas.tasks import Task
from streams.sdk import EpisodeClient, EpisodeConfig, TrainerClient, TrainerConfig
from streams.sdk.mini_swe_env import FINISH_MARKER, MiniSweEpisodeEnvironment
from tests.integration import test_image_episodes
from tests.integration.episode_env import Stack
from tests.sandbox.conftest import image_of, task_images  # noqa: F401 - fixtures the stack needs

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

#: The image-episode pipeline and its sample task, the fixtures of ``test_image_episodes``.
stack, task = test_image_episodes.stack, test_image_episodes.task

AGENT_CONFIG: dict[str, Any] = {
    "system_template": "You fix bugs with bash commands in {{system}}; say {{task_id}} is done by printing the marker.",
    "instance_template": "{{task}}",
    "step_limit": 10,
    "cost_limit": 0,
}
FIX = ["cat hello.py", "sed -i 's/helo/hello/' hello.py && python3 hello.py", f"echo {FINISH_MARKER}"]
GIVE_UP = ["cat hello.py", "python3 hello.py; exit 3", f"echo {FINISH_MARKER}"]


def _agent_run(stack: Stack, task: Task, commands: list[str], run: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """mini-swe-agent's DefaultAgent replaying ``commands`` against an episode of ``task``: its result and messages."""
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.models.test_models import DeterministicModel, make_output

    model = DeterministicModel(  # type: ignore[no-untyped-call]  # its constructors take **kwargs
        outputs=[make_output(f"I run `{c}`.", [{"command": c}]) for c in commands]
    )
    trainer_config = TrainerConfig.from_settings(stack.settings, run, trainer_id=f"{run}.t")
    with (
        TrainerClient(trainer_config) as trainer,
        EpisodeClient(EpisodeConfig.from_settings(stack.settings, run, answer_timeout_s=120), trainer) as client,
    ):
        env = MiniSweEpisodeEnvironment(client, task.task_id, timeout=20, reward_timeout_s=120)
        agent = DefaultAgent(model, env, **AGENT_CONFIG)
        result = agent.run("Make `python /app/hello.py` print hello.")
        assert env.reward is not None
        assert result["reward"] == env.reward.reward
        return result, agent.messages


def _observations(messages: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """What each command's observation message says: (returncode, output)."""
    return [
        (m["extra"]["returncode"], m["extra"]["raw_output"]) for m in messages if "raw_output" in m.get("extra", {})
    ]


@pytest.mark.timeout(300)
def test_mini_swe_agents_loop_solves_the_image_task_through_episodes(stack: Stack, task: Task) -> None:
    result, messages = _agent_run(stack, task, FIX, "mini-swe-fix")
    assert (result["exit_status"], result["reward"]) == ("Submitted", 1.0), (result, stack.worker_logs())
    assert _observations(messages) == [(0, 'print("helo")\n'), (0, "hello\n")], messages

    result, messages = _agent_run(stack, task, GIVE_UP, "mini-swe-give-up")
    assert (result["exit_status"], result["reward"]) == ("Submitted", 0.0), result
    assert _observations(messages) == [(0, 'print("helo")\n'), (3, "helo\n")], messages
