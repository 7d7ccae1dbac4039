"""The fleet's start rate wired into a real executor: ``run_worker`` from Settings with
``RS_SANDBOX_FLEET_START_RATE`` builds its own process sandbox, and its runs start at its share (it owns every
partition of generations and run requests: the whole rate). Each candidate prints the time its run started, from
inside the sandbox, so the start times are the sandbox's own. (The rate over a group of members:
``test_fleet_pace.py``.)"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from schemas.codec import decode
from schemas.events import ExecutionResult, GenerationEvent
from schemas.settings import Settings
from schemas.tasks import Task
from schemas.topics import catalog, topic_for
from tests.integration.helpers import PARTITIONS, start_workers, stop_workers
from tests.integration.test_artifacts_events import Results, publish
from tests.integration.test_fleet_pace import most_in_window
from workers.roles.service import Dependencies
from workers.sandbox.api import Sandbox
from workers.tasks.registry import TaskRegistry

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

RATE = 4.0
RUNS = 16
TASK = Task.model_validate(
    {
        "task_id": "Fleet/add",
        "prompt": "def add(a, b):\n",
        "entry_point": "add",
        "public_tests": {"kind": "call", "cases": [{"id": "p1", "args": [1, 2], "expected": 3}]},
        "hidden_tests": {"kind": "call", "cases": [{"id": "h1", "args": [2, 2], "expected": 4}]},
        "limits": {"timeout_s": 10, "memory_mb": 256},
    }
)
CODE = "import time\nprint(f'started {time.time():.6f}')\ndef add(a, b):\n    return a + b\n"


def test_an_executor_starts_its_sandboxes_at_its_share_of_the_fleet_rate(
    prefix: str,
    kafka_config: dict[str, str],
    process_sandbox: Sandbox,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="workers.sandbox.fleet_pace")
    registry = tmp_path / "registry"
    TaskRegistry(registry).store([TASK])
    # Four runners and eight host slots: without the cap the 16 runs would start in about a second.
    settings = Settings(topic_prefix=prefix, topic_partitions=PARTITIONS, tasks_dir=registry, worker_concurrency=4,
                        worker_store_artifacts=False, sandbox_slots=8, sandbox_fleet_start_rate=RATE)  # fmt: skip
    specs = catalog(prefix, PARTITIONS, 1)
    executions = topic_for("executions", specs).name
    reader = Results(kafka_config, [executions])
    events = [GenerationEvent(generation_id=f"f{i}", episode_id=f"f{i}", run_id="fleet", task_id=TASK.task_id,
                              policy_version="p", code=CODE) for i in range(RUNS)]  # fmt: skip
    publish(kafka_config, topic_for("generations", specs).name, events)
    stop, threads, _metrics, _outcome = start_workers(settings, ["executor"], Dependencies())
    try:
        reader.wait_for(executions, RUNS, 120)
    finally:
        stop_workers(stop, threads)
        reader.close()
    results = [decode(v, ExecutionResult) for v in reader.values[executions]]
    assert all(r.run.status == "ok" for r in results), [r.run for r in results if r.run.status != "ok"]
    starts = sorted(float(r.stdout.split()[1]) for r in results)
    assert f"fleet share: {2 * PARTITIONS} of {2 * PARTITIONS} partitions" in caplog.text, caplog.text
    span = starts[-1] - starts[0]
    # A fresh share starts with no token, and at most one second's worth can gather before the first run.
    assert span >= (RUNS - 1 - RATE) / RATE, f"{RUNS} starts in {span:.2f} s: faster than {RATE}/s"
    assert most_in_window(starts, 1.0) <= RATE + RATE + 1, starts
    print(f"{RUNS} sandbox starts at a fleet rate of {RATE}/s: {span:.2f} s from first to last "
          f"({(RUNS - 1) / span:.2f}/s), most in 1 s: {most_in_window(starts, 1.0)}")  # fmt: skip
