"""Harbor (image) tasks played as agent episodes through the whole pipeline, the way a user plays them:
``rewardstream episode play --task ID --actions FILE --json`` as a process, the episode worker as a process (its
steps in fresh containers of the task image on the real docker daemon, the state a delta in the real S3), the
verifier grading the final WORKDIR in a fresh container, the reward processor: one reward per episode.

The honest agent changes things outside WORKDIR too (they persist from step to step) and fixes hello.py: 1.0.
The hacking agent writes the reward file, plants a ``sitecustomize``, a ``.pth`` and a ``python3`` that print
"hello", links WORKDIR to the reward file, leaves a process behind and writes its own /tests/test.sh, all of
which the next steps see, and none of which reaches the verifier's fresh container: 0.0.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from schemas.tasks import Task
from tests.integration.episode_env import Stack, episode_stack_in_own_bucket
from tests.sandbox.conftest import image_of, task_images  # noqa: F401 - fixtures: the task's image, removed after
from tests.sandbox.image_task import hello
from workers.containers.task_host import ImageTaskHost
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


@pytest.fixture
def stack(  # noqa: PLR0917 - fixtures
    kafka_config: dict[str, str],
    minio_client: Any,
    tmp_path_factory: pytest.TempPathFactory,
    process_sandbox: Sandbox,
    docker_client: Any,
    image_of: Any,  # noqa: F811 - the fixture imported above
    task: Task,
) -> Iterator[Stack]:
    image_of(task)  # built once, as `tasks load` does, and removed after the module
    host = ImageTaskHost(docker_client, image_of)
    with episode_stack_in_own_bucket(kafka_config, minio_client, "image-episodes", tmp_path_factory, process_sandbox,
                                     tasks=[task], image_tasks=host) as stack:  # fmt: skip
        yield stack


def _play(stack: Stack, task: Task, path: Path, actions: list[dict[str, Any]]) -> subprocess.Popen[bytes]:
    path.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in actions))
    return subprocess.Popen(
        [sys.executable, "-m", "rewardstream", "episode", "play", "--task", task.task_id, "--actions", str(path),
         "--json", "--timeout", "300"],
        env=stack.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _lines(stack: Stack, played: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    out, err = played.communicate(timeout=600)
    assert played.returncode == 0, (err.decode(errors="replace"), stack.worker_logs())
    return [orjson.loads(line) for line in out.splitlines()]


def test_an_image_task_episode_is_rewarded_by_its_verifier_alone(stack: Stack, task: Task, tmp_path: Path) -> None:
    honest = _play(stack, task, tmp_path / "honest.jsonl", HONEST)
    hacks = _play(stack, task, tmp_path / "hacks.jsonl", HACKS)
    seen, hacked = _lines(stack, honest), _lines(stack, hacks)

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
