"""The benchmark-only no-op runners: what they answer is read by the product's own code as a real run's answer
(a step the episode worker keeps, an executor result with every case passed), and nothing outside
``benchmarks/`` can reach them (no package imports them, no setting names them)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from schemas.backends import BACKENDS
from schemas.codec import decode
from schemas.events import ExecutionResult, GenerationEvent
from schemas.settings import Settings
from schemas.tasks import CallCase, CallSuite, Task
from workers.episodes.snapshot import pack
from workers.episodes.step import StepAction, run_step
from workers.handler import Done, Source
from workers.roles.common import RoleContext, TaskSource
from workers.roles.executor import ExecutorHandler
from workers.sandbox.api import SandboxStatus
from workers.tasks.registry import TaskRegistry

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("schemas", "bus", "workers", "streams", "infra", "rewardstream")


def _noop() -> ModuleType:
    """benchmarks/ is a script directory, not an installed package: load the file itself."""
    path = ROOT / "benchmarks" / "noop_runner.py"
    spec = importlib.util.spec_from_file_location("noop_runner", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("noop_runner", module)
    spec.loader.exec_module(module)
    return module


def test_a_step_on_the_noop_sandbox_is_an_ok_step_that_keeps_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\n")
    snapshot = pack(tmp_path).data
    sandbox = _noop().NoopStepSandbox()
    outcome = run_step(sandbox, snapshot, StepAction.exec(["true"]))
    assert (outcome.status, outcome.exit_code, outcome.reason) == (SandboxStatus.OK, 0, None)
    assert outcome.snapshot == snapshot
    assert sandbox.runs == 1


def test_the_noop_grader_passes_every_case_and_the_executor_publishes_it(tmp_path: Path) -> None:
    cases = [CallCase(args=[1], expected=2), CallCase(args=[2], expected=3)]
    suite = CallSuite(kind="call", cases=cases)
    task = Task(task_id="T/1", prompt="def inc(x):\n", entry_point="inc", public_tests=suite, hidden_tests=suite)
    registry = TaskRegistry(tmp_path / "tasks")
    registry.store([task])
    context = RoleContext(role="executor", worker="w", tasks=TaskSource(registry), artifacts=None, output_topic="out")
    event = GenerationEvent(generation_id="g", episode_id="g", run_id="r", task_id="T/1", policy_version="p",
                            code="def inc(x):\n    return x\n")  # fmt: skip
    done = ExecutorHandler(context, _noop().NoopGrader()).handle(event, Source("gen", 0, 0))
    assert isinstance(done, Done)
    result = decode(done.outputs[0].value or b"", ExecutionResult)
    assert (result.passed, result.total, result.run.status) == (2, 2, "ok")
    assert result.run.backend == _noop().NOOP_BACKEND


def test_no_setting_and_no_product_module_can_select_the_noop_runners() -> None:
    assert not [b for b in BACKENDS if "noop" in b]
    assert "noop" not in json.dumps(Settings.model_json_schema()).lower()  # no setting's value or name
    mentions = [str(path.relative_to(ROOT)) for package in PRODUCT for path in (ROOT / package).rglob("*.py")
                if "noop_runner" in path.read_text() or "from benchmarks" in path.read_text()]  # fmt: skip
    assert mentions == []
