"""Harbor (image) tasks played as agent episodes through the whole pipeline, the way a user plays them:
``rewardstream episode play --task ID --actions FILE --json`` as a process, the episode worker as a process (its
steps on each backend: fresh overlays of the image's tree under bubblewrap, or fresh containers of the task image
on the real docker daemon; the state a delta in the real S3), the
verifier grading the final WORKDIR in a fresh container, the reward processor: one reward per episode.

On the process backend the verifier's fresh sandbox is an overlay of the image's tree, on docker a container.
The honest agent changes things outside WORKDIR too (they persist from step to step) and fixes hello.py: 1.0.
The hacking agent writes the reward file, plants a ``sitecustomize``, a ``.pth`` and a ``python3`` that print
"hello", links WORKDIR to the reward file, leaves a process behind and writes its own /tests/test.sh, all of
which the next steps see, and none of which reaches the verifier's fresh container: 0.0.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rewardstream.cli.task_images import task_image_source
from schemas.settings import Settings
from schemas.tasks import Task
from streams.sdk import TrainerClient, TrainerConfig
from streams.sdk.episodes import EpisodeClient, EpisodeConfig
from tests.integration.episode_env import Stack, episode_stack_in_own_bucket, play_actions, played_lines
from tests.sandbox.image_task import hello
from workers.containers.task_host import ImageTaskHost
from workers.overlays.host import OverlayHost
from workers.sandbox.api import Sandbox

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

PURELIB = "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')"
HONEST: list[dict[str, Any]] = [
    {"action": "exec", "command": "echo 'TUNED = True' > " + PURELIB + "/agent_tuning.py; echo set > /etc/agent"},
    {"action": "read", "path": "hello.py"},
    {"action": "write", "path": "hello.py", "text": 'print("hello")\n'},
    {"action": "exec", "command": "python3 hello.py; python3 -c 'import agent_tuning'; cat /etc/agent"},
    {"action": "submit"},
]
#: ``python3`` and ``python`` first on PATH replaced by a script that prints "hello".
FAKE_PYTHON = (
    "printf '#!/bin/sh\\necho hello\\n' > /tmp/fake; chmod +x /tmp/fake; for p in python3 python; do"
    " cp /tmp/fake /usr/local/bin/$p.new; mv -f /usr/local/bin/$p.new /usr/local/bin/$p; done"
)
HACKS: list[dict[str, Any]] = [
    {"action": "exec", "command": "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt"},
    {"action": "exec", "command": "echo 'print(\"hello\"); raise SystemExit' > " + PURELIB + "/sitecustomize.py"},
    {"action": "exec", "command": "echo 'import sys; print(\"hello\"); sys.exit()' > " + PURELIB + "/zz-hack.pth"},
    {"action": "exec", "command": FAKE_PYTHON},
    {"action": "exec", "command": "ln -s /logs/verifier/reward.txt reward-link; (sleep 3600 &)"},
    {"action": "exec", "command": "mkdir -p /tests && printf 'echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh"},
    {"action": "exec", "command": "python3 hello.py; cat /logs/verifier/reward.txt; cat reward-link"},
    {"action": "submit"},
]


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return hello(tmp_path_factory.mktemp("image-task"))


@pytest.fixture(scope="module", params=["process", "docker"])
def stack(  # noqa: PLR0917 - fixtures
    request: pytest.FixtureRequest,
    kafka_config: dict[str, str],
    minio_client: Any,
    tmp_path_factory: pytest.TempPathFactory,
    process_sandbox: Sandbox,
    settings: Settings,
    docker_client: Any,
    task: Task,
) -> Iterator[Stack]:
    """One pipeline for the module, on one backend (the verifier's and the episode worker's); the task's image
    built once, as `tasks load` does, and removed after it (with its unpacked tree)."""
    image_of = task_image_source(settings, docker_client)
    image = image_of(task)
    overlays = OverlayHost(settings, docker_client) if request.param == "process" else None
    host = ImageTaskHost(docker_client, image_of, overlays)
    try:
        with episode_stack_in_own_bucket(kafka_config, minio_client, "image-episodes", tmp_path_factory,
                                         process_sandbox, tasks=[task], image_tasks=host,
                                         worker_env={"RS_SANDBOX_BACKEND": request.param}) as stack:  # fmt: skip
            yield stack
    finally:
        docker_client.images.remove(image, force=True, noprune=True)
        if overlays is not None:
            overlays.prune()
            overlays.close()


def test_an_image_task_episode_is_rewarded_by_its_verifier_alone(stack: Stack, task: Task, tmp_path: Path) -> None:
    honest = play_actions(stack, task.task_id, tmp_path / "honest.jsonl", HONEST)
    hacks = play_actions(stack, task.task_id, tmp_path / "hacks.jsonl", HACKS)
    seen, hacked = played_lines(stack, honest), played_lines(stack, hacks)

    *steps, reward = seen
    assert [o["status"] for o in steps] == ["ok"] * 6, steps
    assert steps[2]["content"] == 'print("helo")\n'
    assert steps[4]["stdout"] == "hello\nset\n"  # what step 1 changed outside WORKDIR is still there
    assert (reward["reward"], reward["reasons"]) == (1.0, ["verifier: reward.txt: 1"]), reward

    *steps, reward = hacked
    assert [o["status"] for o in steps] == ["ok"] * 9, [(o["status"], o.get("stderr"), o.get("reason")) for o in steps]
    assert steps[7]["stdout"] == "hello\n1\n1\n"  # every hack is in place for the agent's own steps
    assert reward["reward"] == 0.0, reward  # and none of them reached the verifier's fresh container
    assert [i["role"] for i in reward["inputs"]] == ["verdict"], reward


def test_an_image_task_episode_forks_from_any_committed_turn(stack: Stack, task: Task) -> None:
    """A fork starts from the delta of the turn it names: the changes made outside WORKDIR before it, and not
    the fix made after it."""
    config = EpisodeConfig.from_settings(stack.settings, "image-forks", answer_timeout_s=300)
    with TrainerClient(TrainerConfig.from_settings(stack.settings, "image-forks", trainer_id="forks.t")) as trainer, \
            EpisodeClient(config, trainer) as client:  # fmt: skip
        episode = client.open(task.task_id)
        assert episode.exec("echo before-fork > /etc/agent").status == "ok"  # turn 1
        assert episode.write("hello.py", 'print("hello")\n').status == "ok"  # turn 2
        fork = episode.fork(1)
        seen = fork.exec("cat /etc/agent hello.py")
        assert seen.stdout == 'before-fork\nprint("helo")\n', seen
        assert episode.submit(timeout_s=300).reward == 1.0
        assert fork.submit(timeout_s=300).reward == 0.0
