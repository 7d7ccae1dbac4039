"""The whole pipeline for SDK/submit/logs tests: topics under a unique prefix, executor + verifier + judge
(+ indexer) workers and the reward processor as subprocesses, a HumanEval task registry.

Reuses ``reward_env`` (topics, processor, cleanup); workers are added to its process list so they are killed
in its ``finally``. Also a trainer entry point (``python -m tests.integration.sdk_env trainer ...``) so a
test can SIGKILL-free crash a real trainer process with ``os._exit``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from rewardstream.pipeline import supervised as supervised_command
from schemas.errors import RewardstreamError
from schemas.settings import Settings
from tests.integration.platform_env import shared_cache
from tests.integration.reward_env import PARTITIONS, REPO, RewardEnv, reward_env
from workers.sandbox.api import Sandbox

ROLES = ("executor", "verifier", "judge")


@dataclass(frozen=True)
class Problems:
    """Converted HumanEval problems: id -> (canonical program, wrong program, prompt)."""

    registry_dir: Path
    canonical: dict[str, str]
    wrong: dict[str, str]
    prompts: dict[str, str]


def process_sandbox_or_skip() -> Sandbox:
    """A process sandbox; skip the test (fail it under CI, where everything must run) when it cannot start."""
    from workers.sandbox.factory import make_sandbox

    try:
        return make_sandbox(Settings(), "process")
    except RewardstreamError as exc:
        message = f"process sandbox unavailable ({exc}); run `rewardstream up` / see README to enable it"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


def convert_problems(registry_dir: Path, count: int) -> Problems:
    """The first ``count`` HumanEval problems converted in the sandbox and stored in a registry."""
    from workers.tasks.humaneval import SandboxReference, convert_all, load_problems
    from workers.tasks.registry import TaskRegistry

    sandbox = process_sandbox_or_skip()
    try:
        problems = load_problems()[:count]
        tasks, _ = convert_all(problems, SandboxReference(sandbox), workers=2)
    finally:
        sandbox.close()
    TaskRegistry(registry_dir).store(tasks)
    kept = {t.task_id for t in tasks}
    return Problems(
        registry_dir,
        canonical={p.task_id: p.reference_code for p in problems if p.task_id in kept},
        wrong={p.task_id: p.prompt + "    return None\n" for p in problems if p.task_id in kept},
        prompts={p.task_id: p.prompt for p in problems if p.task_id in kept},
    )


@dataclass
class Pipeline:
    """A running pipeline: the env (topics, processes) and the settings a client in this test should use."""

    env: RewardEnv
    settings: Settings
    worker_env: dict[str, str]

    def logs(self) -> str:
        return self.env.logs()


def worker_environment(prefix: str, registry_dir: Path, tmp: Path, index_prefix: str | None = None) -> dict[str, str]:
    """The environment of a ``rewardstream worker`` process on the topics under ``prefix``."""
    return {
        **os.environ,
        "RS_TOPIC_PREFIX": prefix,
        "RS_TOPIC_PARTITIONS": str(PARTITIONS),
        "RS_TASKS_DIR": str(registry_dir),
        "RS_CACHE_DIR": str(shared_cache(tmp)),
        "RS_METRICS_PORT": "0",
        "RS_WORKER_STORE_ARTIFACTS": "false",
        "RS_WORKER_TRANSACTION_TIMEOUT_MS": "10000",
        "RS_OPENSEARCH_INDEX_PREFIX": index_prefix or "unused",
        "RS_OPENSEARCH_REPLICAS": "0",
        "PYTHONWARNINGS": "ignore",
    }


@contextmanager
def pipeline(
    kafka_config: dict[str, str],
    unique_name: str,
    tmp: Path,
    registry_dir: Path,
    *,
    index_prefix: str | None = None,
    concurrency: int = 2,
    supervised: bool = False,
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[Pipeline]:
    """Topics, the reward processor and one worker per role (and an indexer when ``index_prefix``); with
    ``supervised``, each worker under ``rewardstream.supervisor`` (restarted when it exits, as ``up --pipeline``
    runs it); ``extra_env`` on top of the workers' environment."""
    with reward_env(kafka_config, unique_name, tmp) as env:
        worker_env = {**worker_environment(env.prefix, registry_dir, tmp, index_prefix), **(extra_env or {})}
        env.start(tag="processor")
        roles = [*ROLES, "indexer"] if index_prefix else list(ROLES)
        for role in roles:
            argv = [
                *(supervised_command(role) if supervised else [sys.executable, "-m", "rewardstream"]),
                "worker",
                role,
            ]
            if role != "indexer":
                argv += ["--concurrency", str(concurrency)]
            with (tmp / f"{role}.log").open("wb") as out:
                proc = subprocess.Popen(
                    argv, cwd=REPO, env=worker_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            env.procs.append(proc)
        settings = Settings(  # the workers' registry: the SDK pins each generation to a version of it
            topic_prefix=env.prefix,
            topic_partitions=PARTITIONS,
            opensearch_index_prefix=index_prefix or "unused",
            tasks_dir=registry_dir,
        )
        with env.supervised():
            yield Pipeline(env, settings, worker_env)


def trainer_main(argv: list[str]) -> None:
    """A trainer process: publish generations, take rewards, checkpoint every N, crash (os._exit) after M."""
    from streams.sdk import TrainerClient, TrainerConfig

    parser = argparse.ArgumentParser()
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--generations", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--crash-after", type=int, required=True)
    args = parser.parse_args(argv)
    config = TrainerConfig.from_settings(Settings(), args.run_id, auto_commit=False)
    client = TrainerClient(config)
    rows = [orjson.loads(line) for line in args.generations.read_bytes().splitlines()]
    client.send_many(client.generation(r["task_id"], r["code"], generation_id=r["generation_id"]) for r in rows)
    client.flush()
    with args.out.open("w") as out:
        for n, reward in enumerate(client.rewards(timeout_s=240), 1):
            out.write(f"{reward.generation_id} {reward.reward}\n")
            if n % args.checkpoint_every == 0:
                client.checkpoint()
                out.write("CHECKPOINT\n")
            out.flush()
            if n == args.crash_after:
                os._exit(17)  # a crash: no close, no commit


if __name__ == "__main__":
    if sys.argv[1:2] == ["trainer"]:
        trainer_main(sys.argv[2:])
