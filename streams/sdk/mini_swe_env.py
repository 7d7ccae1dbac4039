"""A mini-swe-agent environment whose commands are the steps of a rewardstream episode.

Why this shape: mini-swe-agent's ``DefaultAgent`` drives any object with ``execute(action, cwd, timeout=)``
returning ``{"output", "returncode", "exception_info"}`` and raises ``Submitted`` (from the environment) when
the agent's command prints ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` first. Here each command is one ``exec``
step of the episode (stdout then stderr as the output, the exit code as the returncode; a step that ran out
of time is returncode -1 with ``exception_info``, as mini-swe-agent's own environments report it), and the
finishing command submits the episode: the ``Submitted`` exit carries the pipeline's reward, so
``agent.run(task)`` returns it. An agent that stops otherwise (a step or cost limit) gets its reward from
``submit()``; a step the worker answers with the episode's end (max turns, its time limit) ends the agent too.

    env = MiniSweEpisodeEnvironment(client, "hello-image")   # client: an EpisodeClient with a TrainerClient
    result = DefaultAgent(model, env, **agent_config).run("Fix hello.py")
    result["reward"]                                          # or env.submit().reward

mini-swe-agent is an optional dependency (``pip install rewardstream[agents]``): it is imported only when an
episode ends, so this module imports without it.
"""

from __future__ import annotations

import platform
import shlex
from typing import Any

from pydantic import BaseModel, Field

from schemas.episodes import ObservationEvent
from schemas.events import RewardEvent
from streams.sdk.episodes import GRADED_ENDS, Episode, EpisodeClient, EpisodeError

#: The first output line by which a mini-swe-agent agent says it is done (its ``LocalEnvironment``'s word).
FINISH_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


class MiniSweEpisodeConfig(BaseModel):
    """What the agent's config and trajectory show of the environment."""

    task_id: str
    #: Where commands run unless the agent says (empty: the task's WORKDIR, the step's own cwd).
    cwd: str = ""
    #: Seconds a command may run (the worker caps it to the task's step timeout).
    timeout: int = Field(30, gt=0)


class MiniSweEpisodeEnvironment:
    """mini-swe-agent's ``Environment`` protocol over one episode of ``task_id``, opened at the first command."""

    def __init__(
        self,
        client: EpisodeClient,
        task_id: str,
        *,
        cwd: str = "",
        timeout: int = 30,
        reward_timeout_s: float = 600.0,
    ) -> None:
        self.client = client
        self.config = MiniSweEpisodeConfig(task_id=task_id, cwd=cwd, timeout=timeout)
        self.reward_timeout_s = reward_timeout_s
        self.episode: Episode | None = None
        self.reward: RewardEvent | None = None

    def execute(self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Run ``action["command"]`` as one exec step; the agent's finishing command also submits the episode."""
        command = str(action.get("command", ""))
        where = cwd or self.config.cwd
        step = f"cd {shlex.quote(where)} && {command}" if where else command
        obs = self.open().exec(step, timeout_s=float(timeout or self.config.timeout))
        output = output_of(obs)
        if obs.ended in GRADED_ENDS:
            self._finish(str(obs.ended), "", self._reward_of(self.open()))
        if obs.ended is not None:
            raise EpisodeError(f"episode {self.open().episode_id!r} ended ({obs.ended}): {obs.reason or 'no reward'}")
        lines = output["output"].lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == FINISH_MARKER and output["returncode"] == 0:
            self._finish("Submitted", "".join(lines[1:]), self.submit())
        return output

    def open(self) -> Episode:
        """The episode, opened on first use."""
        if self.episode is None:
            self.episode = self.client.open(self.config.task_id)
        return self.episode

    def submit(self) -> RewardEvent:
        """Submit the episode (once) and wait for its reward; an agent that ran no command submits the task as
        it came."""
        if self.reward is None:
            self.reward = self.open().submit(timeout_s=self.reward_timeout_s)
        return self.reward

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """The config, the machine (``system``, ``release``, ``machine``: the prompts of mini-swe-agent's shipped
        configs name them) and the episode id; ``kwargs`` last."""
        episode_id = self.episode.episode_id if self.episode else None
        return {**self.config.model_dump(), **platform.uname()._asdict(), "episode_id": episode_id, **kwargs}

    def serialize(self) -> dict[str, Any]:
        """The environment's part of the agent's saved trajectory."""
        kind = f"{type(self).__module__}.{type(self).__name__}"
        config = {"environment": self.config.model_dump(mode="json"), "environment_type": kind}
        reward = self.reward.model_dump(mode="json") if self.reward else None
        return {"info": {"config": config, "episode_id": self.episode and self.episode.episode_id, "reward": reward}}

    def _reward_of(self, episode: Episode) -> RewardEvent:
        """The reward of an episode the worker ended and graded on its own."""
        try:
            self.reward = episode.reward_future().result(timeout=self.reward_timeout_s)
        except TimeoutError:
            raise episode.no_reward(self.reward_timeout_s) from None
        return self.reward

    def _finish(self, status: str, submission: str, reward: RewardEvent) -> None:
        """End the agent's loop: mini-swe-agent's ``Submitted`` exit, with the episode's reward."""
        from minisweagent.exceptions import Submitted

        extra = {"exit_status": status, "submission": submission, "reward": reward.reward,
                 "episode_id": reward.generation_id}  # fmt: skip
        raise Submitted({"role": "exit", "content": submission, "extra": extra})


def output_of(obs: ObservationEvent) -> dict[str, Any]:
    """An exec observation as mini-swe-agent's environments report a command: output, returncode, exception."""
    output = obs.stdout + obs.stderr
    if obs.status == "ok" or (obs.status == "nonzero_exit" and obs.exit_code is not None):
        return {"output": output, "returncode": obs.exit_code or 0, "exception_info": ""}
    why = obs.reason or ("the command timed out" if obs.status == "timeout" else "it did not run to its end")
    return {
        "output": output,
        "returncode": -1 if obs.exit_code is None else obs.exit_code,
        "exception_info": f"An error occurred while executing the command: {obs.status}: {why}",
        "extra": {"exception_type": obs.status, "exception": why},
    }
