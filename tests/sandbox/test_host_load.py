"""A verdict measures the program, never the host: the same corpus graded idle and with every core busy.

The corpus is every listed language's right and wrong solution of a sum task with eight hidden io cases
(compiled languages, JIT runtimes, interpreters), plus a program that only sleeps on a task with a 1 s limit.
It is graded by ``rewardstream grade`` as a whole process, as a user runs it, once on an idle host and once
with two busy loops per core beside it and more sandboxes at once than there are cores. Under load every run
takes several times longer in wall time; the verdicts must not change: every right solution 1.0, every wrong
one 0.0, the same status for every case as idle, no ``sandbox_error``, and the sleeper still times out.

Before limits counted CPU time and own time (``guest/clock.py``), six of twelve right
JavaScript solutions scored 0 in exactly this setting: their suite's wall clock ran out while they waited for
a CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.busy_host import HOGS_PER_CORE, busy_host
from tests.sandbox.language_programs import LOAD_LANGUAGES, eight_case_sum_task, right_and_wrong

pytestmark = [pytest.mark.sandbox, pytest.mark.slow, pytest.mark.timeout(1500)]

SUM_TASK = eight_case_sum_task("load/sum")
SLEEP_TASK = {
    "task_id": "load/sleep",
    "prompt": "Print 1.",
    "limits": {"timeout_s": 1, "memory_mb": 256},
    "hidden_tests": {"kind": "io", "cases": [{"stdin": "", "expected_stdout": "1\n"}]},
}
SLEEPER = "import time\ntime.sleep(120)\nprint(1)\n"


def _corpus(directory: Path) -> tuple[Path, Path]:
    tasks = directory / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in (SUM_TASK, SLEEP_TASK)))
    lines = right_and_wrong("load/sum")
    lines.append({"task_id": "load/sleep", "generation_id": "python-sleeper", "language": "python", "code": SLEEPER})
    solutions = directory / "solutions.jsonl"
    solutions.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return tasks, solutions


def _grade(backend: str, tasks: Path, solutions: Path, out: Path) -> dict[str, dict[str, object]]:
    """Grade the corpus with the CLI, more sandboxes at once than cores; each generation's result."""
    concurrency = 3 * (os.cpu_count() or 2)
    cli = Path(sys.executable).with_name("rewardstream")
    argv = [str(cli), "grade", "--tasks", str(tasks), "--solutions", str(solutions), "--out", str(out)]
    subprocess.run(
        [*argv, "--concurrency", str(concurrency), "--backend", backend], check=False, capture_output=True, timeout=900
    )
    results = [json.loads(line) for line in out.read_text().splitlines()]
    return {str(r["generation_id"]): r for r in results}


@pytest.fixture
def busy() -> Iterator[int]:
    with busy_host() as count:
        yield count


def _verdict(result: dict[str, object]) -> tuple[object, ...]:
    """What must not depend on the host: the status, the reward and every case's status."""
    cases = result.get("cases")
    statuses = (
        {label: [c["status"] for c in found] for label, found in cases.items()} if isinstance(cases, dict) else None
    )
    return result["status"], result["reward"], json.dumps(statuses, sort_keys=True)


def _check_expected(results: dict[str, dict[str, object]]) -> None:
    for lang in LOAD_LANGUAGES:
        right, wrong = results[f"{lang}-right-0"], results[f"{lang}-wrong-0"]
        assert (right["status"], right["reward"]) == ("pass", 1.0), right
        assert (wrong["status"], wrong["reward"]) == ("fail", 0.0), wrong
    sleeper = results["python-sleeper"]
    assert (sleeper["status"], sleeper["reward"]) == ("fail", 0.0), sleeper
    cases = sleeper["cases"]
    assert isinstance(cases, dict)
    assert [c["status"] for c in cases["hidden"]] == ["timeout"], sleeper


@pytest.mark.parametrize("backend", ["process", "docker"])
def test_verdicts_on_a_saturated_host_are_the_verdicts_of_an_idle_one(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    request.getfixturevalue(f"{backend}_sandbox")  # skips (or, under CI, fails) without the backend
    tasks, solutions = _corpus(tmp_path)
    idle = _grade(backend, tasks, solutions, tmp_path / "idle.jsonl")
    _check_expected(idle)
    assert request.getfixturevalue("busy") == HOGS_PER_CORE * (os.cpu_count() or 2)
    loaded = _grade(backend, tasks, solutions, tmp_path / "loaded.jsonl")
    assert set(loaded) == set(idle)
    assert not [g for g, r in loaded.items() if r["status"] == "sandbox_error"], loaded
    _check_expected(loaded)
    assert {g: _verdict(r) for g, r in loaded.items()} == {g: _verdict(r) for g, r in idle.items()}
    # The load was real: runs waited for a CPU, and the limits did not count it.
    waited = [float(r["run"]["wait_ms"]) for r in loaded.values() if isinstance(r.get("run"), dict)]  # type: ignore[index]
    assert max(waited) > 100.0, waited
