"""A gym-style text environment over one episode: ``reset``/``step``/``close`` as rLLM's BaseEnv and
SkyRL-gym's BaseTextEnv (``SkyRLEpisodeEnv``: ``init``, ``step`` -> a dict) define them, duck-typed (neither needed).

Why this shape: an agent framework drives a text policy; each ``step`` takes the model's whole reply, which
``agent_text.parse_action`` turns into one action of the contract. A reply that is not an action is answered
with an observation saying why (no turn is used, nothing is sent): the model can learn from it, the rollout
does not crash. Intermediate rewards are 0; the reward comes once, on the step that ends the episode (a
submit, or the worker ending it at max turns or its time limit), and it is the pipeline's reward.
"""

from __future__ import annotations

from typing import Any

from schemas.episodes import ObservationEvent, SubmitAction
from schemas.events import RewardEvent
from streams.sdk.agent_text import ACTION_HELP, BadAction, parse_action, render_observation
from streams.sdk.episodes import GRADED_ENDS, Episode, EpisodeClient, EpisodeError


class EpisodeEnv:
    """``obs, info = env.reset()`` then ``obs, reward, done, info = env.step(model_reply)`` until done.

    One env is one episode at a time of ``task_id``; ``reset`` opens a new one. ``prompt`` (the task's
    statement, from the trainer's dataset) starts the first observation, followed by the action format.
    """

    def __init__(
        self,
        client: EpisodeClient,
        task_id: str,
        *,
        prompt: str = "",
        answer_timeout_s: float | None = None,
        reward_timeout_s: float = 600.0,
    ) -> None:
        self.client = client
        self.task_id = task_id
        self.prompt = prompt
        self.answer_timeout_s = answer_timeout_s
        self.reward_timeout_s = reward_timeout_s
        self.episode: Episode | None = None
        self.reward: RewardEvent | None = None

    # ---- rLLM's BaseEnv ---------------------------------------------------------------------------------

    def reset(self, task: dict[str, Any] | None = None, **_kwargs: Any) -> tuple[str, dict[str, Any]]:
        """Open a new episode (``task`` may name another ``task_id``/``prompt``); the first observation, info."""
        if task:
            self.task_id = str(task.get("task_id", self.task_id))
            self.prompt = str(task.get("prompt", self.prompt))
        self.reward = None
        self.episode = self.client.open(self.task_id, timeout_s=self.answer_timeout_s)
        opened = self.episode.opened
        parts = [self.prompt, ACTION_HELP, render_observation(opened) if opened else ""]
        return "\n\n".join(p for p in parts if p), self._info(opened)

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """One model reply: (observation text, reward, done, info); reward is 0 until the episode ends."""
        episode = self._episode()
        parsed = parse_action(action)
        if isinstance(parsed, BadAction):
            return parsed.text(), 0.0, False, {"invalid_action": parsed.problem, "episode_id": episode.episode_id}
        if isinstance(parsed, SubmitAction):
            self.reward = episode.submit(timeout_s=self.reward_timeout_s)
            return self._ended(f"submitted: reward {self.reward.reward:g}", self.reward)
        obs = episode.act(parsed, timeout_s=self.answer_timeout_s)
        if obs.ended in GRADED_ENDS:
            self.reward = self._reward_of(episode)
            return self._ended(render_observation(obs), self.reward, obs)
        return render_observation(obs), 0.0, obs.ended is not None, self._info(obs)

    def close(self) -> None:
        """Forget the episode (the shared client stays open; an episode left unsubmitted is abandoned by the
        worker after its idle timeout, without a reward)."""
        self.episode = None

    # ---- parts --------------------------------------------------------------------------------------------

    def _episode(self) -> Episode:
        if self.episode is None:
            raise EpisodeError("step before reset: call reset() to open an episode")
        return self.episode

    def _reward_of(self, episode: Episode) -> RewardEvent:
        try:
            return episode.reward_future().result(timeout=self.reward_timeout_s)
        except TimeoutError:
            raise episode.no_reward(self.reward_timeout_s) from None

    def _ended(
        self, text: str, reward: RewardEvent, obs: ObservationEvent | None = None
    ) -> tuple[str, float, bool, dict[str, Any]]:
        info = {**self._info(obs), "reward_event": reward.model_dump(mode="json")}
        return text, reward.reward, True, info

    def _info(self, obs: ObservationEvent | None) -> dict[str, Any]:
        info: dict[str, Any] = {"episode_id": self.episode.episode_id if self.episode else None}
        if obs is not None:
            info.update(turn=obs.turn, status=obs.status)
        return info


class SkyRLEpisodeEnv:
    """The same episode in SkyRL-gym's BaseTextEnv shape: ``init(prompt)``, ``step`` -> a step-output dict."""

    def __init__(self, env: EpisodeEnv) -> None:
        self.env = env

    def init(self, prompt: Any = None) -> tuple[Any, dict[str, Any]]:
        """Open the episode; a chat prompt (a list of messages) gets the first observation as a user message."""
        text, info = self.env.reset()
        if isinstance(prompt, list):
            return [*prompt, {"role": "user", "content": text}], info
        return text, info

    def step(self, action: str) -> dict[str, Any]:
        """``BaseTextEnvStepOutput``: observations as chat messages, reward, done, metadata."""
        text, reward, done, info = self.env.step(action)
        return {"observations": [{"role": "user", "content": text}], "reward": reward, "done": done,
                "metadata": info, "postprocessed_action": None}  # fmt: skip

    def close(self) -> None:
        self.env.close()
