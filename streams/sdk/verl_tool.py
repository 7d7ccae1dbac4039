"""A verl agent-loop tool over episodes: each trajectory's tool instance is one episode of a workspace task.

Matched to ``verl/tools/base_tool.py`` of verl 0.5-0.7 (the ``ToolResponse`` era): ``__init__(config,
tool_schema)``, ``async create(instance_id=None, **kwargs) -> (instance_id, ToolResponse)`` with the
dataset's ``create_kwargs`` (here ``task_id``), ``async execute(instance_id, parameters, **kwargs) ->
(ToolResponse, step_reward, metrics)``, ``async calc_reward(instance_id) -> float``, ``async
release(instance_id)``. Duck-typed: verl is not needed to import or use it; when verl is installed the
responses are its ``verl.tools.schemas.ToolResponse``, else a ``ToolText`` with the same ``text`` field.

Why a tool: in verl's ToolAgentLoop the model calls tools with JSON arguments; here the arguments are the
episode action object itself (``{"action": "exec", "command": ...}``), checked by ``agent_text.parse_action``
(a bad call is answered with what to fix, never raised). The submit's step reward is the pipeline's reward,
the others 0; ``calc_reward`` returns it too. Load it from a verl tool config with ``class_name:
streams.sdk.verl_tool.VerlEpisodeTool`` and ``config: {run_id: ...}`` (Kafka etc. from ``RS_*`` settings).
"""

from __future__ import annotations

import asyncio
import importlib
from dataclasses import dataclass
from typing import Any

from schemas.episodes import ObservationEvent, SubmitAction
from schemas.settings import Settings
from streams.sdk.agent_text import ACTION_HELP, BadAction, parse_action, render_observation
from streams.sdk.client import TrainerClient
from streams.sdk.config import TrainerConfig
from streams.sdk.episodes import GRADED_ENDS, EpisodeConfig, EpisodeError
from streams.sdk.episodes_aio import AsyncEpisode, AsyncEpisodeClient

#: The tool's OpenAI function schema: its arguments are the episode action object.
TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "workspace",
        "description": "Act in the task's workspace: read or write a file, run a command, or submit. " + ACTION_HELP,
        "parameters": {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["read", "write", "exec", "submit"]},
                "path": {"type": "string", "description": "relative path in the workspace (read, write)"},
                "text": {"type": "string", "description": "the file's new content (write)"},
                "command": {"type": "string", "description": "a shell command (exec)"},
                "timeout_s": {"type": "number", "description": "seconds the command may run (exec)"},
            },
            "required": ["action"],
        },
    },
}


@dataclass(frozen=True)
class ToolText:
    """verl's ToolResponse when verl is not installed: the text the model reads next."""

    text: str | None = None
    image: list[Any] | None = None
    video: list[Any] | None = None


def tool_response(text: str) -> Any:
    """A verl ``ToolResponse`` if verl is installed, else a ``ToolText`` (same ``text`` attribute)."""
    try:
        schemas = importlib.import_module("verl.tools.schemas")
    except ImportError:
        return ToolText(text=text)
    return schemas.ToolResponse(text=text)


class VerlEpisodeTool:
    """One episode per verl tool instance; give ``client`` or let it connect from ``config`` on first use."""

    def __init__(
        self, config: dict[str, Any] | None = None, tool_schema: Any = None, *, client: AsyncEpisodeClient | None = None
    ) -> None:
        self.config = dict(config or {})
        self.tool_schema = tool_schema if tool_schema is not None else TOOL_SCHEMA
        self.name = str(TOOL_SCHEMA["function"]["name"])
        self._client = client
        self._owned: tuple[TrainerClient, AsyncEpisodeClient] | None = None
        self._connecting = asyncio.Lock()
        self._episodes: dict[str, AsyncEpisode] = {}
        self._rewards: dict[str, float] = {}

    def get_openai_tool_schema(self) -> Any:
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, Any]:
        """Open an episode of ``create_kwargs["task_id"]`` (or ``task_id=``); its open observation."""
        create_kwargs = kwargs.get("create_kwargs") or kwargs
        task_id = create_kwargs.get("task_id")
        if not isinstance(task_id, str):
            raise EpisodeError("the episode tool needs a task_id in create_kwargs (the dataset's tools_kwargs)")
        client = await self._connected()
        episode = await client.open(task_id)
        instance = instance_id or episode.episode_id
        self._episodes[instance] = episode
        return instance, tool_response(render_observation(episode.opened) if episode.opened else "opened")

    async def execute(self, instance_id: str, parameters: Any, **_kwargs: Any) -> tuple[Any, float, dict[str, Any]]:
        """One action (the tool call's arguments): its observation, the step reward, metrics."""
        episode = self._episodes.get(instance_id)
        if episode is None:
            return tool_response(f"no open episode for tool instance {instance_id!r}"), 0.0, {"error": "no_episode"}
        parsed = parse_action(parameters)
        if isinstance(parsed, BadAction):
            return tool_response(parsed.text()), 0.0, {"invalid_action": parsed.problem}
        if isinstance(parsed, SubmitAction):
            reward = await episode.submit(timeout_s=float(self.config.get("reward_timeout_s", 600.0)))
            return self._rewarded(instance_id, f"submitted: reward {reward.reward:g}", reward.reward)
        obs = await episode.act(parsed)
        if obs.ended in GRADED_ENDS:
            return self._rewarded(instance_id, render_observation(obs), await self._reward_after(episode))
        return tool_response(render_observation(obs)), 0.0, _metrics(obs)

    async def calc_reward(self, instance_id: str, **_kwargs: Any) -> float:
        """The episode's reward once it ended (0 before)."""
        return self._rewards.get(instance_id, 0.0)

    async def release(self, instance_id: str, **_kwargs: Any) -> None:
        """Forget the instance (an unsubmitted episode is abandoned by the worker after its idle timeout)."""
        self._episodes.pop(instance_id, None)
        self._rewards.pop(instance_id, None)

    async def close(self) -> None:
        """Stop the clients this tool connected itself (a given client is the caller's to close)."""
        if self._owned is not None:
            trainer, client = self._owned
            self._owned = None
            await client.close()
            await asyncio.to_thread(trainer.close)

    # ---- parts --------------------------------------------------------------------------------------------

    async def _connected(self) -> AsyncEpisodeClient:
        async with self._connecting:
            if self._client is None:
                settings = Settings()
                run_id = str(self.config.get("run_id", "verl"))
                trainer = await asyncio.to_thread(TrainerClient, TrainerConfig.from_settings(settings, run_id))
                config = EpisodeConfig.from_settings(settings, run_id)
                self._client = await AsyncEpisodeClient.connect(config, trainer)
                self._owned = (trainer, self._client)
            return self._client

    async def _reward_after(self, episode: AsyncEpisode) -> float:
        """The reward of an episode the worker ended and submitted itself (max turns, time limit)."""
        timeout_s = float(self.config.get("reward_timeout_s", 600.0))
        try:
            reward = await asyncio.wait_for(asyncio.wrap_future(episode.sync.reward_future()), timeout_s)
        except TimeoutError:
            raise episode.sync.no_reward(timeout_s) from None
        return reward.reward

    def _rewarded(self, instance_id: str, text: str, reward: float) -> tuple[Any, float, dict[str, Any]]:
        self._rewards[instance_id] = reward
        return tool_response(text), reward, {"reward": reward, "ended": True}


def _metrics(obs: ObservationEvent) -> dict[str, Any]:
    return {"turn": obs.turn, "status": obs.status, "wall_ms": obs.wall_ms}
