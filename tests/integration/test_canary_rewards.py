"""A canary through the whole pipeline: a candidate that hacks it gets a reward marked canary and not valid, the
processor counts the hit in ``rewardstream_canary_hits_total``, and the SDK's default stream never hands it to
the trainer as training data."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

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


def canary_hits(logs: str) -> float:
    """``rewardstream_canary_hits_total`` of canary/add, scraped from the processor's /metrics."""
    found = re.search(r"rewards: policy .*metrics on (http://\S+/metrics)", logs)
    assert found, logs
    with urllib.request.urlopen(found.group(1), timeout=10) as reply:  # noqa: S310 - the processor, on loopback
        text = reply.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rewardstream_canary_hits_total" and sample.labels.get("task") == "canary/add":
                return float(sample.value)
    return 0.0


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
        deadline = time.monotonic() + 30  # counted once the processor's transaction committed: a moment after
        while canary_hits(pipe.env.logs(tail=None)) < 1:
            assert time.monotonic() < deadline, pipe.logs()
            time.sleep(0.2)
        assert canary_hits(pipe.env.logs(tail=None)) == 1.0  # the honest 0 is no hit
