"""Issue 24's two holes played as real episodes: the episode SDK, the episode worker as a real process, the
executor, verifier and judge and the reward processor over the real Kafka, S3 and process sandbox.

* An agent builds a 450-level directory tree (within its workspace caps) in one step. The restore of a tree
  that deep used to be cubic: the steps after it timed out and an honest fix was lost. Now the steps after
  it are ordinary ones within the task's own step timeout, the fix is kept, and the submit earns 1.0.
* An agent builds a 1,500-link chain and a loop, and reads through them. That read used to end ``crashed``
  (``os.path.realpath``'s RecursionError), and a runner error would have been a ``sandbox_error``, retried
  forever on the episode's partition. Now each is ``rejected`` with the reason, and the episode goes on to
  its reward.

Every hostile step runs only inside the sandbox, as the agent's own ``exec``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from schemas.episodes import ObservationEvent
from schemas.tasks import Task
from streams.sdk import TrainerClient, TrainerConfig
from streams.sdk.episodes import Episode, EpisodeClient, EpisodeConfig
from tests.integration.episode_env import Stack, episode_stack_in_own_bucket
from tests.sandbox.swe_task import OPS_BUGGY, OPS_FIXED, task
from workers.sandbox.api import Sandbox

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

TASK_ID = "swe/calc-deep"
PUBLIC_TESTS = "python3 -m unittest -q tests.test_ops"
DEPTH = 450
DEEP = "/".join(["d"] * DEPTH)
LINKS = (
    "import os\n"
    "for i in range(1500): os.symlink(f'l{i + 1}' if i < 1499 else 'calc/ops.py', f'l{i}')\n"
    "os.symlink('b', 'a'); os.symlink('a', 'b')\n"
    "print('linked')\n"
)


def deep_task() -> Task:
    """The calc task with room for the trees (2,000 entries); its own 10 s step timeout, as any task's."""
    base = task("call", TASK_ID).model_dump(mode="json", by_alias=True)
    base["episode"]["workspace_max_files"] = 2000
    return Task.model_validate(base)


@pytest.fixture(scope="module")
def stack(
    kafka_config: dict[str, str], tmp_path_factory: pytest.TempPathFactory, process_sandbox: Sandbox, minio_client: Any
) -> Iterator[Stack]:
    with episode_stack_in_own_bucket(kafka_config, minio_client, "episode-deep", tmp_path_factory, process_sandbox,
                                     tasks=[deep_task()]) as episodes:  # fmt: skip
        yield episodes


def ok(obs: ObservationEvent, stdout: str | None = None) -> ObservationEvent:
    assert obs.status == "ok", obs
    assert stdout is None or obs.stdout == stdout, obs
    return obs


def rejected(obs: ObservationEvent, why: str) -> None:
    assert obs.status == "rejected", obs
    assert why in (obs.reason or ""), obs


def play(stack: Stack, run: str, agent: Any) -> float:
    """``agent(episode)`` on a fresh episode of the task, then its submit; the reward."""
    trainer = TrainerClient(TrainerConfig.from_settings(stack.settings, run, trainer_id=f"{run}.t"))
    config = EpisodeConfig.from_settings(stack.settings, run, answer_timeout_s=120)
    with trainer, EpisodeClient(config, trainer) as client:
        episode = client.open(TASK_ID)
        assert episode.opened is not None
        assert episode.opened.status == "ok", episode.opened
        agent(episode)
        reward = episode.submit(timeout_s=300)
    assert reward.generation_id == episode.episode_id, reward
    return reward.reward


@pytest.mark.timeout(600)
def test_a_deep_tree_does_not_cost_the_agent_its_fix(stack: Stack) -> None:
    def agent(episode: Episode) -> None:
        made = ok(episode.exec(f"mkdir -p {DEEP} && echo bottom > {DEEP}/f.txt && find d | wc -l"), f"{DEPTH + 1}\n")
        assert made.reason is None, made  # the whole tree kept
        ok(episode.read(f"{DEEP}/f.txt"))
        assert ok(episode.read("calc/ops.py")).content == OPS_BUGGY
        ok(episode.write("calc/ops.py", OPS_FIXED))
        ok(episode.exec(PUBLIC_TESTS))
        ok(episode.exec("find d -type d | wc -l"), f"{DEPTH}\n")  # the tree is still there after the fix

    assert play(stack, "deep-run", agent) == 1.0, stack.worker_logs()


@pytest.mark.timeout(600)
def test_reads_through_a_long_link_chain_or_a_loop_are_rejected_and_the_episode_goes_on(stack: Stack) -> None:
    def agent(episode: Episode) -> None:
        ok(episode.exec(["python3", "-c", LINKS]), "linked\n")
        rejected(episode.read("l0"), "too many levels of symbolic links")
        rejected(episode.read("a"), "too many levels of symbolic links")
        rejected(episode.write("l0", "pwned"), "symlink")
        assert ok(episode.read("l1499")).content == OPS_BUGGY  # one link that stays inside: followed
        ok(episode.write("calc/ops.py", OPS_FIXED))
        ok(episode.exec(PUBLIC_TESTS))

    assert play(stack, "links-run", agent) == 1.0, stack.worker_logs()
