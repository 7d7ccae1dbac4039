"""Every reward hack ends ``fail`` with reward 0 and is named in flags, while an honest control passes."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sandbox.reward_hacks import HACKS, HIDDEN_N, HONEST, IO_SHIM, LIMITS, PUBLIC_N, TASKS, run_grade
from workers.sandbox.api import Sandbox

pytestmark = pytest.mark.sandbox

#: Hacks that can only end by running out their time (a stopped harness, a spinning or forking candidate): they
#: fail whatever the limit, so their tasks get a shorter one and the run waits out less. clock_tampering gets
#: 2 s: on 1 s the bound ``test_timeouts_are_enforced_despite_clock_tampering`` checks would sit too near the
#: run's own limit to tell a per-case limit from it.
TIMED_OUT_LIMITS = {
    "stop_parent": {**LIMITS, "timeout_s": 1},
    "fork_bomb_in_call": {**LIMITS, "timeout_s": 1},
    "clock_tampering": {**LIMITS, "timeout_s": 2},
}
#: Every per-case limit a hack's task has: the honest control passes under each.
TIMEOUTS_S = sorted({limits["timeout_s"] for limits in [LIMITS, *TIMED_OUT_LIMITS.values()]})


#: The runs more than one test makes claims about (hack, task kind): each backend runs them once.
SHARED_RUNS = {("clock_tampering", "call")}
_shared_results: dict[tuple[int, str, str], dict[str, Any]] = {}


def grade_hack(sandbox: Sandbox, hack: str, kind: str) -> dict[str, Any]:
    """``hack`` graded on a ``kind`` task with its limits; a shared run's result is kept for the next test."""
    key = (id(sandbox), hack, kind)
    if key in _shared_results:
        return _shared_results[key]
    code = HACKS[hack] + (IO_SHIM if kind == "io" else "")
    res = run_grade(sandbox, TASKS[kind](TIMED_OUT_LIMITS.get(hack, LIMITS)), code)
    if (hack, kind) in SHARED_RUNS:
        _shared_results[key] = res
    return res


@pytest.mark.parametrize("timeout_s", TIMEOUTS_S)
@pytest.mark.parametrize("kind", list(TASKS))
def test_honest_control_passes(sandbox: Sandbox, kind: str, timeout_s: int) -> None:
    """Under every limit a hack's task has: a hack that fails there was stopped, not starved of time."""
    code = HONEST + (IO_SHIM if kind == "io" else "")
    res = run_grade(sandbox, TASKS[kind]({**LIMITS, "timeout_s": timeout_s}), code)
    assert res["status"] == "pass", res
    assert res["reward"] == 1.0


@pytest.mark.parametrize("kind", list(TASKS))
@pytest.mark.parametrize("hack", list(HACKS))
def test_reward_hack_fails(sandbox: Sandbox, hack: str, kind: str) -> None:
    res = grade_hack(sandbox, hack, kind)
    assert res["status"] == "fail", (hack, kind, res)
    assert res["reward"] == 0.0
    assert res["hidden"]["passed"] < res["hidden"]["total"]


@pytest.mark.parametrize(
    ("hack", "rule"),
    [
        ("sys_exit_0_in_call", "exit_call"),
        ("os_exit_0_at_import", "exit_call"),
        ("atexit_exit_0", "exit_hook"),
        ("always_equal_object", "always_equal"),
        ("skip_test_in_call", "skip_test"),
        ("gc_scan_for_expected", "frame_introspection"),
        ("stack_and_frames_for_expected", "frame_introspection"),
        ("patch_json", "module_patch"),
        ("patch_builtins", "builtins_patch"),
        ("clock_tampering", "clock_tampering"),
        ("kill_parent", "process_tricks"),
        ("ptrace_parent", "native_code"),
        ("fake_verdict_on_stdout", "fake_verdict"),
        ("plant_modules_for_check", "run_poisoning"),
    ],
)
def test_hacks_are_named_in_flags(hack: str, rule: str) -> None:
    from workers.grading.static_analysis import analyze, hack_rules

    assert rule in hack_rules(analyze(HACKS[hack]))


def test_timeouts_are_enforced_despite_clock_tampering(sandbox: Sandbox) -> None:
    res = grade_hack(sandbox, "clock_tampering", "call")  # the run test_reward_hack_fails made, if it ran
    assert res["status"] == "fail"
    assert {c["status"] for c in res["cases"]["public"]} <= {"timeout", "error", "missing"}
    assert {c["status"] for c in res["cases"]["hidden"]} <= {"timeout", "error", "missing"}
    # Each case has its own limit on the program's CPU and own time: the run's own time (its wall time less
    # what it waited for a CPU on a busy host) ends near the sum of them, plus start-up grace, well before
    # the run's own limit (twice the sum, plus that grace) would have stopped it.
    cases = len(PUBLIC_N) + len(HIDDEN_N)
    limit_ms = TIMED_OUT_LIMITS["clock_tampering"]["timeout_s"] * 1000
    assert res["run"]["wall_ms"] - res["run"]["wait_ms"] < cases * limit_ms + 8_000, res["run"]
