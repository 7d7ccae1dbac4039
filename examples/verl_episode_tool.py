"""An agent episode as a verl agent-loop tool (``VerlEpisodeTool``, verl's BaseTool shape): the tool call's
arguments are the episode action object; the submit's step reward (and ``calc_reward``) is the pipeline's.

In verl, name it in the tool config (``class_name: streams.sdk.verl_tool.VerlEpisodeTool``, ``config:
{run_id: ...}``) and put ``task_id`` in the dataset's ``tools_kwargs.workspace.create_kwargs``. Here a
scripted policy makes the calls ToolAgentLoop would make, playing the shipped fix of one SWE task.

Try it (with ``rewardstream up --pipeline`` running)::

    python examples/verl_episode_tool.py --task swe/clamp   # prints reward 1.0
"""

from __future__ import annotations

import argparse
import asyncio

from schemas.settings import Settings
from streams.sdk.verl_tool import VerlEpisodeTool
from workers.tasks.registry import TaskRegistry
from workers.tasks.swe import SPECS, fix_transcript, swe_tasks


async def play(task_id: str, run_id: str) -> float:
    """create -> execute per action -> calc_reward -> release, as verl's ToolAgentLoop calls a tool."""
    spec = next(s for s in SPECS if task_id in (s.task_id, s.task_id + "-io"))
    tool = VerlEpisodeTool({"run_id": run_id, "reward_timeout_s": 300})
    try:
        instance_id, opened = await tool.create(None, create_kwargs={"task_id": task_id})
        print(f"instance {instance_id}: {opened.text.splitlines()[0]}")
        for arguments in fix_transcript(spec):
            response, step_reward, _metrics = await tool.execute(instance_id, arguments)
            print(f"> {arguments['action']}: {response.text.splitlines()[0]} (step reward {step_reward:g})")
        reward = await tool.calc_reward(instance_id)
        await tool.release(instance_id)
        return reward
    finally:
        await tool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="swe/clamp")
    parser.add_argument("--run-id", default="example-verl-tool")
    args = parser.parse_args()
    TaskRegistry.from_settings(Settings()).store(swe_tasks())  # the shipped SWE tasks, in the pipeline's registry
    print(f"reward {asyncio.run(play(args.task, args.run_id)):g}")


if __name__ == "__main__":
    main()
