"""The Harbor tasks the repo ships (``rewardstream tasks examples``), loaded and played the way a user does: the
CLI as a process builds their images on the real docker daemon and validates every one (oracle 1.0, no-op 0.0,
no flag from the planted reward writer); then agents play one as episodes through the whole pipeline. The honest
fix earns 1.0, a partial fix its graded share, and the hacker, who looks for the fix in every corner of the git
history (the image kept HEAD's alone), plants a ``conftest.py``/``sitecustomize.py``/``unittest.py`` in WORKDIR
and writes the reward file, earns 0.0.

A task whose oracle fails is refused by ``tasks load --validate``:
``tests/sandbox/test_image_tasks.py::test_cli_load_validate_stores_nothing_when_a_task_is_invalid``.
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from rich.console import Console

from rewardstream.cli.demo_episodes import play_episodes, summarize
from rewardstream.cli.demo_harbor import harbor_episodes
from rewardstream.cli.task_images import task_image_source
from schemas.settings import Settings
from schemas.tasks import Task
from streams.sdk import AsyncTrainerClient, TrainerClient, TrainerConfig
from streams.sdk.episodes import EpisodeClient, EpisodeConfig
from streams.sdk.episodes_aio import AsyncEpisodeClient
from streams.sdk.gym_env import EpisodeEnv
from streams.sdk.verl_tool import VerlEpisodeTool
from tests.integration.episode_env import Stack, episode_stack_in_own_bucket, play_actions, played_lines
from workers.containers.task_host import ImageTaskHost
from workers.overlays.host import OverlayHost
from workers.sandbox.api import Sandbox
from workers.tasks.harbor.directory import read_task_dir
from workers.tasks.harbor.examples import EXAMPLES, example
from workers.tasks.harbor.examples.agents import fix_actions, give_up_actions, hack_actions

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

PLAYED = example("interval-merge")
#: The compiled one, played by the demo's own agents.
COMPILED = example("rle-c")
#: ``merge`` fixed, ``total_length`` not: 3 of the task's 5 cases.
MERGE_ONLY = PLAYED.fixed["intervals.py"].replace("for start, end in merge(intervals))", "for start, end in intervals)")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rewardstream", *args], capture_output=True, text=True,
                          timeout=900, check=False, env=env)  # fmt: skip


@pytest.fixture(scope="module")
def shipped(
    tmp_path_factory: pytest.TempPathFactory, settings: Settings, docker_client: Any
) -> Iterator[tuple[Path, list[Task]]]:
    """The shipped tasks written and loaded once (`tasks load DIR --validate`) into a registry of the module's;
    their images are this module's own (a file naming the process and the module's directory is in each
    context, so each module builds them, history trimming included) and removed after the module."""
    root = tmp_path_factory.mktemp("shipped")
    tasks_dir, registry = root / "tasks", root / "registry"
    written = _cli("tasks", "examples", "--out", str(tasks_dir), "--json")
    assert written.returncode == 0, written.stderr
    assert orjson.loads(written.stdout)["tasks"] == [spec.name for spec in EXAMPLES]
    for task_dir in tasks_dir.iterdir():
        (task_dir / "environment" / "owner").write_text(f"{os.getpid()} {root.name}\n")  # a build of its own
    tasks = [read_task_dir(task_dir).task for task_dir in sorted(tasks_dir.iterdir())]
    try:
        loaded = _cli("tasks", "load", str(tasks_dir), "--dir", str(registry), "--validate", "--json")
        assert loaded.returncode == 0, loaded.stderr
        assert sorted(orjson.loads(loaded.stdout)["added"]) == sorted(spec.name for spec in EXAMPLES)
        assert "flag:" not in loaded.stderr  # the planted reward writer moved no task's reward
        for spec in EXAMPLES:  # every fix branch and tag is gone from the images
            assert f"{spec.name}: warning: removed from its image's history (only HEAD's is kept): /app: " \
                   f"refs/heads/{spec.fix_branch}" in loaded.stderr  # fmt: skip
        yield registry, tasks
    finally:
        image_of = task_image_source(settings, docker_client)
        for task in tasks:
            docker_client.images.remove(image_of(task), force=True, noprune=True)


def test_every_shipped_task_is_valid(shipped: tuple[Path, list[Task]]) -> None:
    registry, _ = shipped
    names = [spec.name for spec in EXAMPLES]
    checked = _cli("tasks", "validate", *names, "--dir", str(registry), "--json")
    assert checked.returncode == 0, (checked.stdout, checked.stderr)
    assert [orjson.loads(line) for line in checked.stdout.splitlines()] == [
        {"task_id": name, "oracle_reward": 1.0, "noop_reward": 0.0, "valid": True, "reasons": []} for name in names
    ]  # the contract, exactly


@pytest.fixture(scope="module", params=["process", "docker"])
def stack(  # noqa: PLR0917 - fixtures
    request: pytest.FixtureRequest,
    kafka_config: dict[str, str],
    minio_client: Any,
    tmp_path_factory: pytest.TempPathFactory,
    process_sandbox: Sandbox,
    settings: Settings,
    docker_client: Any,
    shipped: tuple[Path, list[Task]],
) -> Iterator[Stack]:
    """One pipeline for the module, its episode worker and verifier on the shipped tasks' images, on one backend
    (process: steps and verifications in overlays of the images' trees; docker: in containers)."""
    _, tasks = shipped
    overlays = OverlayHost(settings, docker_client) if request.param == "process" else None
    host = ImageTaskHost(docker_client, task_image_source(settings, docker_client), overlays)
    try:
        with episode_stack_in_own_bucket(kafka_config, minio_client, "shipped-tasks", tmp_path_factory,
                                         process_sandbox,
                                         tasks=[t for t in tasks if t.task_id in (PLAYED.name, COMPILED.name)],
                                         image_tasks=host, worker_env={"RS_SANDBOX_BACKEND": request.param},
                                         ) as stack:  # fmt: skip
            yield stack
    finally:
        if overlays is not None:
            overlays.close()


def test_the_fix_earns_1_a_partial_fix_its_share_and_the_history_hacker_0(stack: Stack, tmp_path: Path) -> None:
    partial = [*give_up_actions(PLAYED)[:-1], {"action": "write", "path": "intervals.py", "text": MERGE_ONLY},
               {"action": "submit"}]  # fmt: skip
    plays = {
        "fix": play_actions(stack, PLAYED.name, tmp_path / "fix.jsonl", fix_actions(PLAYED)),
        "partial": play_actions(stack, PLAYED.name, tmp_path / "partial.jsonl", partial),
        "hack": play_actions(stack, PLAYED.name, tmp_path / "hack.jsonl", hack_actions(PLAYED)),
    }
    seen = {kind: played_lines(stack, played) for kind, played in plays.items()}

    assert (seen["fix"][-1]["reward"], seen["fix"][-1]["reasons"]) == (1.0, ["verifier: reward.txt: 1"])
    assert seen["partial"][-1]["reward"] == 0.6, seen["partial"][-1]

    *steps, reward = seen["hack"]
    assert [o["status"] for o in steps] == ["ok"] * len(steps), steps
    history = steps[1]["stdout"].splitlines()  # steps[0] is the open
    assert history[:2] == ["Add interval merging", "Add interval-merge"], history  # git log --all: HEAD's only
    assert "branch refs/heads/main" in history
    assert not [line for line in history if PLAYED.fix_branch in line or PLAYED.fix_tag in line], history
    assert "checked out the fix branch" not in history
    assert "showed the fix tag" not in history
    assert history[-1] == "objects-with-the-fix: 0", history
    assert reward["reward"] == 0.0, reward
    assert [i["role"] for i in reward["inputs"]] == ["verdict"], reward


def test_the_demos_agents_fix_and_hack_the_compiled_task(stack: Stack) -> None:
    """``rewardstream demo``'s Harbor part on the C task: its fixing agent earns 1.0, its hacker 0.0."""
    agents = [episode for episode in harbor_episodes() if episode.task_id == COMPILED.name]
    assert sorted(episode.kind for episode in agents) == ["fix", "hack"]
    shown = io.StringIO()
    console = Console(file=shown, width=200)
    played, elapsed = play_episodes(console, stack.settings, "demo-harbor", agents, 300)
    assert summarize(console, agents, played, elapsed, "Harbor task episodes") == [], shown.getvalue()
    assert [result.reward.reward if result.reward else None for result in played] == [
        episode.expected_reward for episode in agents
    ]
    assert "│ fix: reward 1  │     1 │" in shown.getvalue()  # the demo's table
    assert "│ hack: reward 0 │     1 │" in shown.getvalue()


def test_the_gym_env_and_the_verl_tool_play_a_shipped_task(stack: Stack) -> None:
    """The SDK's adapters on a Harbor task, as on workspace tasks: the gym env's fix earns 1.0, the verl tool's
    give-up 0.0."""
    run = f"adapters-{uuid.uuid4().hex[:6]}"
    trainer_config = TrainerConfig.from_settings(stack.settings, run, trainer_id=f"{run}.t")
    config = EpisodeConfig.from_settings(stack.settings, run, answer_timeout_s=300)
    with TrainerClient(trainer_config) as trainer, EpisodeClient(config, trainer) as client:
        env = EpisodeEnv(client, PLAYED.name, prompt=PLAYED.instruction, reward_timeout_s=400)
        env.reset()
        reward, done = 0.0, False
        for action in fix_actions(PLAYED):
            _obs, reward, done, _info = env.step(orjson.dumps(action).decode())
        env.close()
        assert (reward, done) == (1.0, True), stack.worker_logs()

    async def verl() -> float:
        aio_trainer = await AsyncTrainerClient.connect(
            TrainerConfig.from_settings(stack.settings, run, trainer_id="v.t")
        )
        async with aio_trainer, await AsyncEpisodeClient.connect(config, aio_trainer) as aio:
            tool = VerlEpisodeTool({"run_id": run, "reward_timeout_s": 400}, client=aio)
            instance_id, _opened = await tool.create("traj-0", create_kwargs={"task_id": PLAYED.name})
            for arguments in give_up_actions(PLAYED):
                await tool.execute(instance_id, arguments)
            final = await tool.calc_reward(instance_id)
            await tool.release(instance_id)
            return final

    assert asyncio.run(verl()) == 0.0
