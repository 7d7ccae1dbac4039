"""``rewardstream explain`` and ``rewardstream replay`` of a Harbor (image) task's episode, as processes against
the real pipeline (the episode worker's steps and the verifier's test.sh in fresh containers of the task's image
on the real docker daemon, the state in the real S3, the real Kafka): explain shows the steps, the image each
step and the verification ran on (the daemon's id of the task's image), the end of test.sh's output, the reward
file and the reward; the reward the trainer reads carries none of test.sh's output. Replay re-verifies the
submit from the WORKDIR snapshot its generation names and shows both verifications' evidence.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from rewardstream.cli.task_images import task_image_source
from schemas.settings import Settings
from schemas.tasks import Task
from tests.integration.episode_env import Stack, episode_stack_in_own_bucket
from tests.integration.helpers import cli, cli_json
from tests.sandbox.image_task import hello
from workers.containers.task_host import ImageTaskHost
from workers.sandbox.api import Sandbox

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

#: The hidden tests: they print what they checked (only operators may see it) and write a reward.json.
TEST_SH = """#!/bin/bash
out="$(rs-as-agent python3 /app/hello.py)"
echo "hidden check: hello.py printed '$out'"
if [ "$out" = hello ]; then
  echo '{"reward": 1.0, "checks": 1}' > /logs/verifier/reward.json; echo "HIDDEN-VERDICT passed 1/1"
else
  echo 0 > /logs/verifier/reward.txt; echo "HIDDEN-VERDICT failed 0/1"
fi
"""
ACTIONS: list[dict[str, Any]] = [
    {"action": "exec", "command": "python3 hello.py"},
    {"action": "write", "path": "hello.py", "text": 'print("hello")\n'},
    {"action": "exec", "command": "python3 hello.py"},
    {"action": "submit"},
]
REWARD_FILE = '{"reward": 1.0, "checks": 1}\n'


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return hello(tmp_path_factory.mktemp("explain-image-task"), {"tests/test.sh": TEST_SH})


@pytest.fixture(scope="module")
def image_id(settings: Settings, docker_client: Any, task: Task) -> Iterator[tuple[str, ImageTaskHost]]:
    """The task's image, built once as `tasks load` does (its daemon id, and the host that finds it), removed
    after the module."""
    image_of = task_image_source(settings, docker_client)
    image = image_of(task)
    try:
        yield str(docker_client.images.get(image).id), ImageTaskHost(docker_client, image_of)
    finally:
        docker_client.images.remove(image, force=True, noprune=True)


@pytest.fixture(scope="module")
def stack(  # noqa: PLR0917 - fixtures
    kafka_config: dict[str, str],
    minio_client: Any,
    tmp_path_factory: pytest.TempPathFactory,
    process_sandbox: Sandbox,
    task: Task,
    image_id: tuple[str, ImageTaskHost],
) -> Iterator[Stack]:
    with episode_stack_in_own_bucket(kafka_config, minio_client, "explain-image", tmp_path_factory, process_sandbox,
                                     tasks=[task], image_tasks=image_id[1]) as stack:  # fmt: skip
        yield stack


def _story_when(gid: str, env: dict[str, str], ready: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """explain --json until ``ready`` holds of its story, within a deadline."""
    deadline = time.monotonic() + 120
    while True:
        story: dict[str, Any] = cli_json(["explain", gid, "--json"], env)
        if ready(story):
            return story
        assert time.monotonic() < deadline, story
        time.sleep(0.5)  # poll interval of the condition above, not a wait for it


def _graded(story: dict[str, Any]) -> bool:
    episode = story.get("episode") or {}
    return story["verdict"] is not None and story["reward"] is not None and episode.get("ended") == "submitted"


def test_explain_and_replay_show_an_image_episodes_steps_image_verifier_output_and_reward_file(
    stack: Stack, task: Task, image_id: tuple[str, ImageTaskHost], tmp_path: Path
) -> None:
    image, run_id = image_id[0], f"explain-image-{uuid.uuid4().hex[:8]}"
    actions = tmp_path / "actions.jsonl"
    actions.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in ACTIONS))
    played = subprocess.run(
        [sys.executable, "-m", "rewardstream", "episode", "play", "--task", task.task_id, "--actions", str(actions),
         "--run-id", run_id, "--json", "--timeout", "300"],
        env=stack.env, capture_output=True, timeout=600, check=False,
    )  # fmt: skip
    assert played.returncode == 0, (played.stderr.decode(errors="replace"), stack.worker_logs())
    *observations, reward = [orjson.loads(line) for line in played.stdout.splitlines()]
    episode_id = observations[0]["episode_id"]
    assert [o["status"] for o in observations] == ["ok"] * 5, observations
    # each step's container ran the task's image, and says which (the trainer may know its environment)
    assert [o.get("image_id") for o in observations] == [None, image, image, image, None], observations
    assert reward["reward"] == 1.0, reward
    # the trainer's reward carries the verifier's reason, never what the hidden tests printed or the reward file
    assert not [s for s in ("hidden check", "HIDDEN-VERDICT", "checks") if s in played.stdout.decode()], reward

    story = _story_when(episode_id, stack.env, _graded)
    steps = story["episode"]["steps"]
    assert [(s["turn"], s["action"], s["status"], s["image_id"]) for s in steps] == [
        (0, "open", "ok", None), (1, "exec", "ok", image), (2, "write", "ok", image), (3, "exec", "ok", image),
        (4, "submit", "ok", None)]  # fmt: skip
    assert steps[1]["stdout_head"] == "helo\n"
    verdict = story["verdict"]
    assert verdict["suite_kind"] == "verifier"
    verifier = verdict["verifier"]
    assert (verifier["reward"], verifier["source"], verifier["image_id"]) == (1.0, "reward.json", image), verifier
    assert verifier["output_tail"] == "hidden check: hello.py printed 'hello'\nHIDDEN-VERDICT passed 1/1\n"
    assert verifier["reward_file"] == REWARD_FILE
    assert story["reward"]["reward"] == 1.0
    assert "HIDDEN-VERDICT" not in orjson.dumps(story["reward"]).decode()

    text = cli(["explain", episode_id], {**stack.env, "COLUMNS": "250"})  # a table's rows unwrapped
    assert text.returncode == 0, text.stderr
    rows = [" ".join(line.split()) for line in text.stdout.splitlines()]
    order = [
        "agent episode",
        f"task image of the steps: {image}",
        "turn 1: exec python3 hello.py -> ok, exit 0",
        "stdout: helo",
        "turn 4: submit -> ok",
        "hidden verdict (an image task's verifier: test.sh)",
        "verifier reward 1.0 from reward.json",
        f"task image {image}",
        f"reward file reward.json: {REWARD_FILE!r}",
        "test.sh output (tail) hidden check: hello.py printed 'hello'",
        "HIDDEN-VERDICT passed 1/1",
        "reward 1.0",
    ]
    at = 0
    for part in order:  # each part on a row of its own, in this order
        at = next((i for i in range(at, len(rows)) if rows[i].startswith(part)), -1)
        assert at >= 0, (part, text.stdout)

    # Replay: the submit re-verified from its recorded WORKDIR snapshot in a fresh container, same evidence.
    replayed = cli(["replay", "--run-id", run_id, "--json", "--timeout", "300"], stack.env, timeout=900)
    assert replayed.returncode == 0, replayed.stderr[-4000:]
    report = orjson.loads(replayed.stdout)
    assert (report["replayed"], report["counts"]["same"]) == (1, 1), report
    (entry,) = report["generations"]
    assert entry["generation_id"] == episode_id
    assert (entry["old"]["reward"], entry["new"]["reward"]) == (1.0, 1.0)
    old, new = entry["verifier"]["old"], entry["verifier"]["new"]
    assert old["event_id"] == verdict["event_id"]
    assert new["event_id"] != old["event_id"]  # a verification of its own, in the replay's namespace
    assert old["verifier"] == verifier
    for key in ("reward", "source", "image_id", "output_tail", "reward_file"):
        assert new["verifier"][key] == verifier[key], (key, new)
