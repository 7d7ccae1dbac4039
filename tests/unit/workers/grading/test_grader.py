"""Grader logic end to end with trusted, benign code only.

``LocalRunner`` executes the harness as a plain subprocess WITHOUT isolation: it is only ever given the
well-behaved programs written in this file. Hostile programs are tested in tests/sandbox on real backends.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rewardstream.cli.graded import Graded, PolicyGrader, apply_policy
from schemas.errors import SandboxError
from schemas.tasks import Limits, Task
from streams.reward.policy import load_policy
from workers.grading import CallArgs, Flag, Grader, GraderConfig, GradeResult, run_call_cases
from workers.grading.grader import RunInfo
from workers.grading.static_analysis import analyze
from workers.grading.suites import CaseOutcome, SuiteOutcome, harness_program
from workers.sandbox.api import SandboxResult, SandboxSpec, SandboxStatus
from workers.sandbox.guest_program import GuestProgram

PY = ("/usr/bin/python3", "-I", "-S", "-B")


class LocalRunner:
    """Runs a spec in a temp dir with no isolation (benign test code only)."""

    name = "local"

    def run(self, spec: SandboxSpec) -> SandboxResult:
        with tempfile.TemporaryDirectory() as tmp:
            for rel, data in spec.files.items():
                Path(tmp, rel).write_bytes(data)
            started = time.monotonic()
            try:
                proc = subprocess.run(
                    list(spec.argv),
                    input=spec.stdin,
                    cwd=tmp,
                    capture_output=True,
                    timeout=spec.timeout_s,
                    check=False,
                )
            except subprocess.TimeoutExpired as exc:
                return result(SandboxStatus.TIMEOUT, stdout=exc.stdout or b"")
            status = SandboxStatus.OK if proc.returncode == 0 else SandboxStatus.NONZERO_EXIT
            return result(
                status,
                stdout=proc.stdout,
                stderr=proc.stderr,
                exit_code=proc.returncode,
                wall_ms=(time.monotonic() - started) * 1000,
            )

    def close(self) -> None:
        pass


def result(status: SandboxStatus, **kw: Any) -> SandboxResult:
    base: dict[str, Any] = {
        "exit_code": 0,
        "signal": None,
        "stdout": b"",
        "stderr": b"",
        "stdout_truncated": False,
        "stderr_truncated": False,
        "wall_ms": 1.0,
        "cpu_ms": 1.0,
        "max_rss_kb": 1,
        "backend": "fake",
    }
    base.update(kw)
    return SandboxResult(status=status, **base)


class ScriptedSandbox:
    """Returns queued outcomes (a result or an exception), then delegates to a real runner."""

    name = "scripted"

    def __init__(self, script: list[SandboxResult | Exception], then: LocalRunner | None = None) -> None:
        self.script = list(script)
        self.then = then
        self.specs: list[SandboxSpec] = []

    def run(self, spec: SandboxSpec) -> SandboxResult:
        self.specs.append(spec)
        if self.script:
            step = self.script.pop(0)
            if isinstance(step, Exception):
                raise step
            return step
        assert self.then is not None
        return self.then.run(spec)

    def close(self) -> None:
        pass


def grader(sandbox: Any, sleeps: list[float] | None = None, **cfg: Any) -> Grader:
    sleep: Callable[[float], None] = sleeps.append if sleeps is not None else (lambda _s: None)
    return Grader(sandbox, GraderConfig(python_argv=PY, backoff_s=0.01, **cfg), sleep=sleep)


POLICY = load_policy()


def rewarding(sandbox: Any, sleeps: list[float] | None = None, **cfg: Any) -> PolicyGrader:
    """``grader`` with the pipeline's default reward policy applied, as ``rewardstream grade`` does."""
    return PolicyGrader(grader(sandbox, sleeps, **cfg), POLICY)


def decide(status: str, passed: int, total: int, flags: list[Flag], *, io_only: bool = False) -> Graded:
    """The policy's decision on a synthetic grade: ``total`` hidden cases, ``passed`` of them passed."""
    cases = tuple(CaseOutcome(str(i), "passed" if i < passed else "failed") for i in range(total))
    run = RunInfo(result(SandboxStatus.OK), SandboxStatus.OK, 1)
    error = "bwrap failed" if status == "sandbox_error" else None
    hidden = SuiteOutcome("hidden", "io" if io_only else "call", cases)
    return apply_policy(GradeResult("g", "t/1", status, None, hidden, tuple(flags), run, error), POLICY)


def task(**overrides: Any) -> Task:
    data: dict[str, Any] = {
        "task_id": "t/1",
        "prompt": "add",
        "entry_point": "add",
        "public_tests": {"kind": "call", "cases": [{"args": [1, 2], "expected": 3}]},
        "hidden_tests": {
            "kind": "call",
            "cases": [
                {"id": "a", "args": [2, 2], "expected": 4},
                {"id": "b", "args": [0.5, 0.25], "expected": 0.75},
                {"id": "c", "args": [[1], [2]], "expected": [1, 2]},
            ],
        },
        "limits": {"timeout_s": 5, "memory_mb": 256},
    }
    data.update(overrides)
    return Task.model_validate(data)


GOOD = "def add(a, b):\n    return a + b\n"


def test_correct_solution_passes_with_reward_one() -> None:
    res = rewarding(LocalRunner()).grade(task(), GOOD, generation_id="g1").to_json()
    assert res["status"] == "pass", res
    assert res["reward"] == 1.0
    assert res["public"] == {"passed": 1, "total": 1}
    assert res["hidden"] == {"passed": 3, "total": 3}
    assert res["generation_id"] == "g1"
    assert res["task_id"] == "t/1"
    assert res["flags"] == []
    assert res["run"]["attempts"] == 1
    assert res["run"]["hardened"] is True


def test_an_empty_public_suite_proves_nothing() -> None:
    res = rewarding(LocalRunner()).grade(task(public_tests={"kind": "call", "cases": []}), GOOD).to_json()
    assert (res["status"], res["reward"]) == ("fail", 0.0)
    assert res["public"] == {"passed": 0, "total": 0}


def test_wrong_and_raising_solutions_fail() -> None:
    g = rewarding(LocalRunner())
    wrong = g.grade(task(), "def add(a, b):\n    return a - b\n").to_json()
    assert wrong["status"] == "fail"
    assert wrong["reward"] == 0.0
    raising = g.grade(task(), "def add(a, b):\n    raise ValueError('no')\n").to_json()
    assert raising["status"] == "fail"
    assert {c["status"] for c in raising["cases"]["hidden"]} == {"error"}
    assert "ValueError" in raising["cases"]["public"][0]["message"]
    assert all("message" not in c for c in raising["cases"]["hidden"])  # hidden feedback is status only
    broken = g.grade(task(), "def add(a, b)\n    return a + b\n").to_json()
    assert broken["status"] == "fail"
    assert "syntax_error" in {f["rule"] for f in broken["static_flags"]}


def test_special_casing_public_tests_fails_hidden() -> None:
    code = "def add(a, b):\n    if (a, b) == (1, 2):\n        return 3\n    return 0\n"
    res = rewarding(LocalRunner()).grade(task(), code).to_json()
    assert res["public"] == {"passed": 1, "total": 1}
    assert res["hidden"]["passed"] < res["hidden"]["total"]
    assert res["status"] == "fail"
    assert res["reward"] == 0.0


def test_a_tuple_is_not_a_list_end_to_end() -> None:
    as_list = task(hidden_tests={"kind": "call", "cases": [{"args": [1, 2], "expected": [1, 2]}]}, public_tests=None)
    as_tuple = task(
        hidden_tests={"kind": "call", "cases": [{"args": [1, 2], "expected": {"$t": [1, 2]}}]}, public_tests=None
    )
    returns_tuple = "def add(a, b):\n    return (a, b)\n"
    returns_list = "def add(a, b):\n    return [a, b]\n"
    assert rewarding(LocalRunner()).grade(as_tuple, returns_tuple).status == "pass"
    assert rewarding(LocalRunner()).grade(as_list, returns_list).status == "pass"
    assert rewarding(LocalRunner()).grade(as_list, returns_tuple).status == "fail"
    res = rewarding(LocalRunner()).grade(as_tuple, returns_list).to_json()
    assert res["status"] == "fail"
    assert res["public"] == {"passed": 0, "total": 0}


def test_bool_is_not_int_end_to_end() -> None:
    t = task(hidden_tests={"kind": "call", "cases": [{"args": [1, 0], "expected": 1}]}, public_tests=None)
    res = rewarding(LocalRunner()).grade(t, "def add(a, b):\n    return True\n").to_json()
    assert res["status"] == "fail"


def test_io_suite() -> None:
    t = task(
        entry_point=None,
        public_tests=None,
        hidden_tests={
            "kind": "io",
            "cases": [{"stdin": "1 2\n", "expected_stdout": "3\n"}, {"stdin": "5 5", "expected_stdout": "10"}],
        },
    )
    code = "a, b = map(int, input().split())\nprint(a + b, end='  \\n')\n"
    assert rewarding(LocalRunner()).grade(t, code).status == "pass"
    assert rewarding(LocalRunner()).grade(t, "print(3)\n").to_json()["hidden"] == {"passed": 1, "total": 2}
    exits = rewarding(LocalRunner()).grade(t, "import sys\nprint(3)\nsys.exit(1)\n").to_json()
    assert exits["hidden"]["passed"] == 0  # a nonzero exit fails the case even with the right output


def test_assert_suite_runs_check_outside_the_candidate() -> None:
    check = (
        "def check(candidate):\n"
        "    assert candidate(1, 2) == 3\n"
        "    assert candidate((1,), (2,)) == (1, 2)\n"
        "    assert abs(candidate(0.1, 0.2) - 0.3) < 1e-9\n"
    )
    t = task(public_tests=None, hidden_tests={"kind": "assert", "code": check})
    assert rewarding(LocalRunner()).grade(t, GOOD).status == "pass"
    res = rewarding(LocalRunner()).grade(t, "def add(a, b):\n    return 3\n").to_json()
    assert res["status"] == "fail"
    assert res["hidden"] == {"passed": 0, "total": 1}


def test_check_that_never_calls_the_candidate_proves_nothing() -> None:
    t = task(public_tests=None, hidden_tests={"kind": "assert", "code": "def check(candidate):\n    pass\n"})
    assert rewarding(LocalRunner()).grade(t, GOOD).status == "fail"


def test_mixed_suites_in_one_run() -> None:
    t = task(public_tests={"kind": "assert", "code": "def check(candidate):\n    assert candidate(2, 3) == 5\n"})
    runner = ScriptedSandbox([], then=LocalRunner())
    res = rewarding(runner).grade(t, GOOD).to_json()
    assert res["status"] == "pass", res
    assert len(runner.specs) == 1  # public and hidden batched into one sandbox run
    assert res["suite_kinds"] == {"public": "assert", "hidden": "call"}


def test_sandbox_errors_are_retried_with_backoff_then_reported() -> None:
    sleeps: list[float] = []
    box = ScriptedSandbox([result(SandboxStatus.SANDBOX_ERROR, error="bwrap failed")] * 3)
    res = rewarding(box, sleeps, attempts=3).grade(task(), GOOD).to_json()
    assert res["status"] == "sandbox_error"
    assert res["reward"] == 0.0
    assert res["run"]["attempts"] == 3
    assert len(box.specs) == 3
    assert len(sleeps) == 2
    assert sleeps[1] > sleeps[0]
    assert any("sandbox_error" in r for r in res["reasons"])
    inputs = [s.stdin.removeprefix(harness_program().stdin()) for s in box.specs]
    assert len({i[:32] for i in inputs}) == 3  # a fresh nonce per attempt


def test_transient_failures_then_success() -> None:
    box = ScriptedSandbox(
        [RuntimeError("daemon went away"), result(SandboxStatus.OK, stdout=b"not a harness record\n")],
        then=LocalRunner(),
    )
    res = rewarding(box).grade(task(), GOOD).to_json()
    assert res["status"] == "pass"
    assert res["run"]["attempts"] == 3


def test_harness_that_never_started_is_infrastructure() -> None:
    box = ScriptedSandbox([result(SandboxStatus.NONZERO_EXIT, exit_code=127, stderr=b"python3: not found")] * 2)
    res = rewarding(box, attempts=2).grade(task(), GOOD).to_json()
    assert res["status"] == "sandbox_error"
    assert "not found" in " ".join(res["reasons"])


def test_run_call_cases_returns_typed_json_values() -> None:
    code = (
        "def f(x):\n"
        "    if x == 'tuple':\n        return (1, (2, 3))\n"
        "    if x == 'set':\n        return {1}\n"
        "    if x == 'nan':\n        return float('nan')\n"
        "    if x == 'raise':\n        raise KeyError(x)\n"
        "    return {'x': x}\n"
    )
    cases = [CallArgs(id=name, args=[name]) for name in ("tuple", "set", "nan", "raise", "ok")]
    box = ScriptedSandbox([], then=LocalRunner())
    out = Grader(box, GraderConfig(python_argv=PY)).run_call_cases(code, "f", cases, Limits())
    assert out["tuple"].ok
    assert out["tuple"].value == {"$t": [1, {"$t": [2, 3]}]}  # typed JSON: a reference keeps its types
    assert out["set"].ok
    assert out["set"].value == {"$s": [1]}
    assert not out["nan"].ok
    assert not out["raise"].ok
    assert "KeyError" in (out["raise"].error or "")
    assert out["ok"].value == {"x": "ok"}


def test_run_call_cases_raises_only_for_infrastructure() -> None:
    box = ScriptedSandbox([result(SandboxStatus.SANDBOX_ERROR)] * 3)
    with pytest.raises(SandboxError):
        run_call_cases(
            box,
            "def f():\n    return 1\n",
            "f",
            [CallArgs(id="0")],
            Limits(),
            config=GraderConfig(python_argv=PY, backoff_s=0.0),
        )


def test_default_policy_gates_on_hack_flags() -> None:
    assert decide("pass", 3, 3, []).reward == 1.0
    assert decide("fail", 2, 3, []).reward == 0.0
    assert decide("sandbox_error", 0, 3, []).reward == 0.0
    assert decide("pass", 0, 0, []).reward == 0.0
    hacked = decide("pass", 3, 3, analyze("import os\ndef f():\n    os._exit(0)\n"))
    assert hacked.reward == 0.0
    assert hacked.flags == ("exit_call",)
    warned = decide("pass", 3, 3, analyze("x = eval('1')\n"))
    assert warned.reward == 1.0


def test_hack_flag_gates_a_passing_run() -> None:
    code = "import gc\ndef add(a, b):\n    return a + b\n"
    res = rewarding(LocalRunner()).grade(task(), code).to_json()
    assert res["status"] == "pass"
    assert res["reward"] == 0.0
    assert res["flags"] == ["frame_introspection"]


def test_harness_falls_back_to_source_when_bytecode_does_not_match() -> None:
    g = rewarding(LocalRunner())
    shipped = g.grader._harness  # as if the sandbox ran another Python version: the magic does not match
    g.grader._harness = GuestProgram(shipped.name, shipped.source, b"\0" * 16 + b"not bytecode")
    assert g.grade(task(), GOOD).status == "pass"


IO_TASK: dict[str, Any] = {
    "entry_point": None,
    "public_tests": None,
    "hidden_tests": {
        "kind": "io",
        "cases": [{"stdin": "1 2\n", "expected_stdout": "3\n"}, {"stdin": "5 5", "expected_stdout": "10"}],
    },
}


@pytest.mark.parametrize(
    ("code", "rule"),
    [
        ("import sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit(0)\n", "exit_call"),
        ("a, b = map(int, input().split())\nprint(a + b)\nexit()\n", "exit_call"),
        (
            "import signal\nsignal.signal(signal.SIGPIPE, signal.SIG_DFL)\nprint(sum(map(int, input().split())))\n",
            "signal_tricks",
        ),
    ],
)
def test_io_only_task_does_not_gate_on_exit_or_signal_flags(code: str, rule: str) -> None:
    """An io program that ends with sys.exit(0) earns its reward; the flag stays visible as a reason."""
    res = rewarding(LocalRunner()).grade(task(**IO_TASK), code).to_json()
    assert res["status"] == "pass"
    assert res["reward"] == 1.0
    assert res["flags"] == []
    assert rule in {f["rule"] for f in res["static_flags"]}
    assert any(rule in r and "not gating" in r for r in res["reasons"])


def test_io_only_exit_cannot_fake_output() -> None:
    """Exiting early with status 0 and no output is just a wrong answer."""
    res = rewarding(LocalRunner()).grade(task(**IO_TASK), "import os\nos._exit(0)\n").to_json()
    assert res["status"] == "fail"
    assert res["reward"] == 0.0


def test_exit_call_still_gates_call_and_mixed_tasks() -> None:
    code = "import sys\ndef add(a, b):\n    return a + b\nif False:\n    sys.exit(0)\n"
    res = rewarding(LocalRunner()).grade(task(), code).to_json()
    assert res["status"] == "pass"
    assert (res["reward"], res["flags"]) == (0.0, ["exit_call"])
    mixed = task(
        public_tests={"kind": "io", "cases": [{"stdin": "", "expected_stdout": ""}]},
    )
    assert rewarding(LocalRunner()).grade(mixed, code).to_json()["reward"] == 0.0


def test_io_only_still_gates_other_hacks() -> None:
    code = "import gc, sys\nprint(sum(map(int, input().split())))\nsys.exit(0)\n"
    res = rewarding(LocalRunner()).grade(task(**IO_TASK), code).to_json()
    assert res["status"] == "pass"
    assert (res["reward"], res["flags"]) == (0.0, ["frame_introspection"])


def test_default_policy_io_only_flag() -> None:
    flags = analyze("import sys\nsys.exit(0)\n")
    assert decide("pass", 2, 2, flags).reward == 0.0
    relaxed = decide("pass", 2, 2, flags, io_only=True)
    assert (relaxed.reward, relaxed.flags) == (1.0, ())
    assert decide("fail", 1, 2, flags, io_only=True).reward == 0.0
