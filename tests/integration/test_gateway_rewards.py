"""The gateway's rewards endpoints against the whole pipeline (executor, verifier, judge, reward processor):
``POST /v1/rewards`` waiting and polling, a poll answered by a second replica, and OpenRLHF's remote reward,
with canonical and wrong HumanEval solutions rewarded 1.0 and 0.0.

One pipeline and two gateway replicas per module, shared by the tests here.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests

from schemas.codec import decode
from schemas.events import GenerationEvent
from tests.integration.gateway_env import Gateway, Stack
from tests.integration.reward_env import REPO, Reader
from tests.integration.sdk_env import Problems, convert_problems, pipeline
from workers.tasks.registry import TaskRegistry

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]


@dataclass
class Rewarded:
    problems: Problems
    a: Gateway
    b: Gateway
    stack: Stack


@pytest.fixture(scope="module")
def rewarded(kafka_config: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rewarded]:
    problems = convert_problems(tmp_path_factory.mktemp("registry"), 2)
    tmp = tmp_path_factory.mktemp("gateway-rewards")
    with pipeline(kafka_config, f"gwrew-{uuid.uuid4().hex[:8]}", tmp, problems.registry_dir) as pipe:
        gateways = Stack(pipe.env.prefix, tmp, dict(pipe.worker_env))
        try:
            a, b = gateways.gateway("gateway-a"), gateways.gateway("gateway-b")
            yield Rewarded(problems, a, b, gateways)
        finally:
            gateways.stop()


def _tasks(r: Rewarded) -> list[str]:
    return sorted(r.problems.canonical)


def test_a_batch_waits_for_its_rewards_right_and_wrong(rewarded: Rewarded, kafka_config: dict[str, str]) -> None:
    task = _tasks(rewarded)[0]
    body = {
        "run_id": "gw-wait",
        "generations": [
            {"task_id": task, "code": rewarded.problems.canonical[task], "generation_id": f"right-{uuid.uuid4().hex}"},
            {"task_id": task, "code": rewarded.problems.wrong[task]},
        ],
        "wait": True,
        "timeout_s": 240,
    }
    answer = requests.post(f"{rewarded.a.url}/v1/rewards", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    out = answer.json()
    assert out["complete"] is True
    assert [r["reward"] for r in out["rewards"]] == [1.0, 0.0], out
    assert out["rewards"][0]["generation_id"] == body["generations"][0]["generation_id"]  # type: ignore[index]
    assert all(r["status"] == "rewarded" and r["task_id"] == task for r in out["rewards"])
    assert out["rewards"][1]["reasons"]  # why it got 0
    # The gateway pinned each generation to the task's latest version when it published it.
    latest = TaskRegistry(rewarded.problems.registry_dir).latest_version(task)
    reader = Reader(kafka_config, f"{rewarded.stack.prefix}generations")
    try:

        def published() -> dict[str, GenerationEvent]:
            return {e.generation_id: e for e in (decode(v, GenerationEvent) for v in reader.values)}

        ids = {r["generation_id"] for r in out["rewards"]}
        reader.wait(lambda: ids <= set(published()), 60, "the gateway's generations")
        assert {published()[gid].task_version for gid in ids} == {latest}
    finally:
        reader.close()


def test_a_poll_on_another_replica_finds_the_reward(rewarded: Rewarded) -> None:
    task = _tasks(rewarded)[1]
    gid = f"poll-{uuid.uuid4().hex}"
    body = {"run_id": "gw-poll", "wait": False, "generations": [
        {"task_id": task, "code": rewarded.problems.canonical[task], "generation_id": gid}
    ]}  # fmt: skip
    answer = requests.post(f"{rewarded.a.url}/v1/rewards", json=body, timeout=60)
    assert answer.status_code == 202, answer.text
    assert answer.json()["rewards"] == [
        {"generation_id": gid, "status": "pending", "task_id": None, "reward": None, "reasons": [], "flags": [],
         "missing": [], "components": {}, "policy_name": None, "policy_version": None,
         "valid": None, "canary": None, "invalid_reason": None, "poll": f"/v1/rewards/{gid}"}
    ]  # fmt: skip
    deadline = time.monotonic() + 240
    seen_on_a: list[str] = []
    while True:
        on_b = requests.get(f"{rewarded.b.url}/v1/rewards/{gid}", timeout=30)
        if on_b.status_code == 200:
            break
        assert on_b.status_code == 404, on_b.text  # B never saw the request: not pending there, not yet rewarded
        seen_on_a.append(requests.get(f"{rewarded.a.url}/v1/rewards/{gid}", timeout=30).json()["status"])
        assert time.monotonic() < deadline, rewarded.stack.logs()
        time.sleep(0.5)
    assert on_b.json()["status"] == "rewarded"
    assert on_b.json()["reward"] == 1.0
    assert set(seen_on_a) <= {"pending", "rewarded"}
    assert requests.get(f"{rewarded.a.url}/v1/rewards/{gid}", timeout=30).json()["reward"] == 1.0


def test_openrlhf_remote_reward_names_tasks_by_label(rewarded: Rewarded) -> None:
    task = _tasks(rewarded)[0]
    prompt = f"<|im_start|>user\nSolve {task}<|im_end|>\n<|im_start|>assistant\n"
    right = f"{prompt}Here it is:\n```python\n{rewarded.problems.canonical[task]}```<|im_end|>"
    wrong = f"{prompt}```python\n{rewarded.problems.wrong[task]}```<|im_end|>"
    body = {"query": [right, wrong], "prompts": [prompt, prompt], "labels": [task, f'{{"task_id": "{task}"}}']}
    answer = requests.post(f"{rewarded.b.url}/get_reward", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    assert answer.json()["rewards"] == [1.0, 0.0]
    assert answer.json()["scores"] == [1.0, 0.0]

    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "openrlhf_remote_rm.py"), "--url", f"{rewarded.a.url}/get_reward",
         "--task", task],
        cwd=REPO, env=rewarded.stack.env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rewards: [1.0, 0.0]" in done.stdout, done.stdout


def test_bad_batches_are_422_naming_the_field(rewarded: Rewarded) -> None:
    task = _tasks(rewarded)[0]
    url = f"{rewarded.a.url}/v1/rewards"
    batch = [{"task_id": task, "code": "x"}, {"task_id": "no/such", "code": "x"}]
    unknown = requests.post(url, json={"generations": batch}, timeout=60)
    assert unknown.status_code == 422
    assert unknown.json()["detail"][0]["loc"] == ["body", "generations", 1, "task_id"]
    twice = requests.post(url, json={"generations": [{"task_id": task, "code": "x", "generation_id": "g1"}] * 2},
                          timeout=60)  # fmt: skip
    assert twice.status_code == 422
    assert twice.json()["detail"][0]["loc"] == ["body", "generations", 1, "generation_id"]
    surrogate = requests.post(url, json={"generations": [{"task_id": task, "code": "def f():\ud800"}]}, timeout=60)
    assert surrogate.status_code == 422, surrogate.text  # was a text/plain 500 (issue 24)
    assert surrogate.json()["detail"][0]["loc"] == ["body", "generations", 0, "code"]
    assert "lone surrogate" in surrogate.json()["detail"][0]["msg"]
    no_labels = requests.post(f"{rewarded.a.url}/get_reward", json={"query": ["x"]}, timeout=60)
    assert no_labels.status_code == 422
    assert no_labels.json()["detail"][0]["loc"] == ["body", "labels"]
    missing = requests.get(f"{rewarded.b.url}/v1/rewards/never-published", timeout=30)
    assert missing.status_code == 404
