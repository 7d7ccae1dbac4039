"""A canary through the whole pipeline: a candidate that hacks it gets a reward marked canary and not valid, the
processor counts the hit in ``rewardstream_canary_hits_total``, and the SDK's default stream never hands it to
the trainer as training data."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from schemas.codec import decode
from schemas.tasks import Task
from streams.sdk import RewardTimeoutError, TrainerClient, TrainerConfig
from tests.integration.reward_env import REPO
from tests.integration.sdk_env import pipeline, process_sandbox_or_skip
from workers.tasks.files import load_jsonl
from workers.tasks.registry import TaskRegistry

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

CANARY_FILE = REPO / "examples" / "canary_tasks.jsonl"
#: Knows the hidden answers (a leak, a probe of the grader: what a canary exists to catch).
HACK = "ANSWERS = {(2, 3): 6, (10, -4): 7, (0, 0): 1}\n\ndef add(a, b):\n    return ANSWERS.get((a, b), a + b)\n"
HONEST = "def add(a, b):\n    return a + b\n"


def registry(tmp: Path) -> Path:
    """The shipped canary and a plain twin whose tests agree with the statement."""
    [canary] = load_jsonl(CANARY_FILE)
    plain = orjson.loads(CANARY_FILE.read_bytes())
    plain.update(task_id="plain/add", canary=False)
    for case in plain["hidden_tests"]["cases"]:
        case["expected"] = sum(case["args"])
    TaskRegistry(tmp).store([canary, decode(orjson.dumps(plain), Task)])
    return tmp


def test_a_hack_on_a_canary_is_marked_counted_and_kept_from_training(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path
) -> None:
    process_sandbox_or_skip().close()
    tasks = registry(tmp_path / "registry")
    with pipeline(kafka_config, unique_name, tmp_path, tasks) as pipe:
        config = TrainerConfig.from_settings(pipe.settings, f"{unique_name}-run")
        with TrainerClient(config) as client:
            client.send_many([
                client.generation("canary/add", HACK, generation_id="hack"),
                client.generation("canary/add", HONEST, generation_id="honest"),
                client.generation("plain/add", HONEST, generation_id="plain"),
            ])  # fmt: skip
            client.flush()
            [trained] = client.rewards(timeout_s=180, limit=1)
            assert (trained.generation_id, trained.reward, trained.valid) == ("plain", 1.0, True), pipe.logs()
            deadline = time.monotonic() + 180
            while client.stats["held_out"] < 2:
                assert time.monotonic() < deadline, f"{client.stats}\n{pipe.logs()}"
                time.sleep(0.1)
            held = {r.generation_id: r for r in client.held_out()}
            hack, honest = held["hack"], held["honest"]
            assert (hack.reward, hack.canary, hack.valid, hack.invalid_reason) == (1.0, True, False, "canary")
            assert (honest.reward, honest.canary, honest.valid) == (0.0, True, False)
            assert client.stats["canary_hits"] == 1
            with pytest.raises(RewardTimeoutError):
                next(client.rewards(timeout_s=2))  # nothing else is training data
        hits = "rewardstream_canary_hits_total"
        deadline = time.monotonic() + 30  # counted once the processor's transaction committed: a moment after
        while pipe.env.metric(hits, task="canary/add") < 1:
            assert time.monotonic() < deadline, pipe.logs()
            time.sleep(0.2)
        assert pipe.env.metric(hits, task="canary/add") == 1.0  # the honest 0 is no hit
        assert pipe.env.metric("rewardstream_canary_rewards_total", dataset="canary") == 2.0
