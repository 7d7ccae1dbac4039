"""mini-swe-agent's own agent loop as a rewardstream client: its ``DefaultAgent`` with a scripted model (its
``DeterministicModel``, no LLM) plays a shipped Harbor task (``interval-merge``, loaded and validated as
``test_shipped_tasks`` does) through the whole pipeline: each command one exec step in a fresh sandbox of the
task image, the finishing command the submit, the verifier's reward the agent's result. The agent that fixes
intervals.py earns 1.0; the one that looks, runs the buggy code and gives up earns 0.0.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from streams.sdk import EpisodeClient, EpisodeConfig, TrainerClient, TrainerConfig
from streams.sdk.mini_swe_env import FINISH_MARKER, MiniSweEpisodeEnvironment
from tests.integration import test_shipped_tasks
from tests.integration.episode_env import Stack

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

#: The shipped tasks loaded and the pipeline on them, the fixtures of ``test_shipped_tasks``.
shipped, stack = test_shipped_tasks.shipped, test_shipped_tasks.stack
PLAYED = test_shipped_tasks.PLAYED
FIXED = base64.b64encode(PLAYED.fixed["intervals.py"].encode()).decode()

AGENT_CONFIG: dict[str, Any] = {
    "system_template": "You fix bugs with bash commands in {{system}}; say {{task_id}} is done by printing the marker.",
    "instance_template": "{{task}}",
    "step_limit": 10,
    "cost_limit": 0,
}
PROBE = "python3 -c 'from intervals import merge; print(merge([(1, 3), (3, 5)]))'"
FIX = ["ls", f"echo {FIXED} | base64 -d > intervals.py && {PROBE}", f"echo {FINISH_MARKER}"]
GIVE_UP = ["ls", f"{PROBE}; exit 3", f"echo {FINISH_MARKER}"]


def _agent_run(
    stack: Stack, task_id: str, commands: list[str], run: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
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
        env = MiniSweEpisodeEnvironment(client, task_id, timeout=20, reward_timeout_s=120)
        agent = DefaultAgent(model, env, **AGENT_CONFIG)
        result = agent.run(PLAYED.instruction)
        assert env.reward is not None
        assert result["reward"] == env.reward.reward
        return result, agent.messages


def _observations(messages: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """What each command's observation message says: (returncode, output)."""
    return [
        (m["extra"]["returncode"], m["extra"]["raw_output"]) for m in messages if "raw_output" in m.get("extra", {})
    ]


@pytest.mark.timeout(300)
def test_mini_swe_agents_loop_solves_a_shipped_task_through_episodes(stack: Stack) -> None:
    result, messages = _agent_run(stack, PLAYED.name, FIX, "mini-swe-fix")
    assert (result["exit_status"], result["reward"]) == ("Submitted", 1.0), (result, stack.worker_logs())
    (listed, files), (fixed, merged) = _observations(messages)
    assert (listed, fixed, merged) == (0, 0, "[(1, 5)]\n"), messages
    assert "intervals.py" in files

    result, messages = _agent_run(stack, PLAYED.name, GIVE_UP, "mini-swe-give-up")
    assert (result["exit_status"], result["reward"]) == ("Submitted", 0.0), result
    (_, _), (code, buggy) = _observations(messages)
    assert code == 3
    assert buggy != "[(1, 5)]\n", messages
