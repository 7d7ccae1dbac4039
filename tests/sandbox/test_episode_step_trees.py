"""Agent steps with deep trees, long link chains and unreadable files (issue 24): cut or refused, never crashed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from schemas.status import REJECTED, SandboxStatus
from tests.sandbox.episode_step_env import LIMITS, members, sh, snapshot
from workers.episodes.snapshot import Caps
from workers.episodes.step import StepAction, StepLimits, StepOutcome, run_step
from workers.sandbox.api import Sandbox

pytestmark = pytest.mark.sandbox


# --------------------------------------------------------------------------------------------------------
# Deep trees and long link chains (issue 24): the agent builds them, the steps after it carry on

DEEP_CAPS = Caps(max_bytes=4 << 20, max_entries=2000)
#: The episode worker's own step limits but for memory and caps: the steps after a deep tree need no more time.
NORMAL = replace(LIMITS, grace_s=StepLimits().grace_s)
CALC_BUGGY = b"def add(a, b):\n    return a - b\n"
CALC_FIXED = b"def add(a, b):\n    return a + b\n"


def deep_step(sandbox: Sandbox, snap: bytes, action: StepAction) -> StepOutcome:
    outcome = run_step(sandbox, snap, action, DEEP_CAPS, NORMAL)
    assert outcome.status != SandboxStatus.SANDBOX_ERROR, outcome.reason
    return outcome


def test_a_deep_tree_costs_the_steps_after_it_nothing(sandbox: Sandbox) -> None:
    """450 levels made in one step (within the caps) used to make every later restore cubic: the steps after
    it timed out and an honest fix was lost. Now they are ordinary steps, and the tree and the fix are kept."""
    deep = "/".join(["d"] * 450)
    made = deep_step(sandbox, snapshot({"calc.py": CALC_BUGGY}),
                     StepAction.exec(f"mkdir -p {deep} && echo bottom > {deep}/f.txt && find d | wc -l"))  # fmt: skip
    assert (made.status, made.stdout, made.workspace_kept, made.reason) == (SandboxStatus.OK, b"451\n", True, None)
    assert members(made.snapshot)[f"{deep}/f.txt"] == ("f", b"bottom\n", 0o644)
    read = deep_step(sandbox, made.snapshot, StepAction.read(f"{deep}/f.txt"))
    assert (read.status, read.content) == (SandboxStatus.OK, b"bottom\n"), read.reason
    fixed = deep_step(sandbox, made.snapshot, StepAction.write("calc.py", CALC_FIXED))
    assert (fixed.status, fixed.workspace_kept) == (SandboxStatus.OK, True), fixed.reason
    check = "python3 -c 'import calc; print(calc.add(2, 2))'; find d -type d | wc -l"
    checked = deep_step(sandbox, fixed.snapshot, StepAction.exec(check))
    assert (checked.status, checked.stdout) == (SandboxStatus.OK, b"4\n450\n"), (checked.reason, checked.stderr)
    assert checked.snapshot == fixed.snapshot


MAKEDIRS_600 = ["python3", "-c", "import os; os.makedirs('/'.join(['d'] * 600))"]


def test_a_tree_deeper_than_a_path_allows_is_cut_where_paths_end_and_says_so(sandbox: Sandbox) -> None:
    """Depth is capped by the path cap (``MAX_NAME_BYTES``, 1024 bytes: 512 levels of one-letter names): what
    lies deeper is left out of the workspace, the outcome says so, and the workspace kept restores as usual."""
    made = deep_step(sandbox, snapshot({"keep": b"k"}), StepAction.exec(MAKEDIRS_600))
    assert (made.status, made.workspace_kept) == (SandboxStatus.OK, True), made.reason
    assert made.reason is not None
    assert "left out of the workspace" in made.reason, made.reason
    assert "1024 bytes" in made.reason, made.reason
    assert max(name.count("/") + 1 for name in members(made.snapshot) if name.startswith("d")) == 512
    after = deep_step(sandbox, made.snapshot, StepAction.exec("find d -type d | wc -l; cat keep"))
    assert (after.status, after.stdout, after.snapshot) == (SandboxStatus.OK, b"512\nk", made.snapshot), after.reason


LINKS = (
    "import os\n"
    "for i in range(1500): os.symlink(f'l{i + 1}' if i < 1499 else 'ok.txt', f'l{i}')\n"
    "for i in range(40): os.symlink(f'm{i + 1}' if i < 39 else 'ok.txt', f'm{i}')\n"
    "os.symlink('b', 'a'); os.symlink('a', 'b'); os.symlink('self', 'self')\n"
    "print(len(os.listdir()))\n"
)


def test_long_link_chains_and_loops_are_rejected_not_crashed(sandbox: Sandbox) -> None:
    """A read through a 1,500-link chain ended the step ``crashed`` (``os.path.realpath`` recursed until
    RecursionError). Links are followed as the kernel follows them, 40 at most: a longer chain or a loop is
    ``rejected`` with the reason, a write never goes through a link, and the episode's workspace goes on."""
    made = deep_step(sandbox, snapshot({"ok.txt": b"inside\n", "calc.py": CALC_BUGGY}),
                     StepAction.exec(["python3", "-c", LINKS]))  # fmt: skip
    assert (made.status, made.stdout, made.workspace_kept) == (SandboxStatus.OK, b"1545\n", True), made.reason
    for action, why in [
        (StepAction.read("l0"), "too many levels of symbolic links"),
        (StepAction.read("l1459"), "too many levels of symbolic links"),  # 41 links
        (StepAction.read("l0/x"), "too many levels of symbolic links"),
        (StepAction.read("a"), "too many levels of symbolic links"),
        (StepAction.read("self"), "too many levels of symbolic links"),
        (StepAction.write("l0", b"pwned"), "symlink"),
        (StepAction.write("a/x", b"pwned"), "symlink"),
    ]:
        out = deep_step(sandbox, made.snapshot, action)
        assert (out.status, out.snapshot, out.workspace_kept) == (REJECTED, made.snapshot, True), (action, out)
        assert out.reason is not None, action
        assert why in out.reason, (action, out.reason)
    for path in ("m0", "l1460"):  # 40 links: what the kernel follows too
        out = deep_step(sandbox, made.snapshot, StepAction.read(path))
        assert (out.status, out.content) == (SandboxStatus.OK, b"inside\n"), (path, out.reason)
    kernel = deep_step(sandbox, made.snapshot, StepAction.exec("cat m0; cat l0"))
    assert (kernel.status, kernel.stdout) == (SandboxStatus.NONZERO_EXIT, b"inside\n"), kernel.reason
    assert b"Too many levels of symbolic links" in kernel.stderr, kernel.stderr
    fixed = deep_step(sandbox, made.snapshot, StepAction.write("calc.py", CALC_FIXED))
    checked = deep_step(sandbox, fixed.snapshot, StepAction.exec("python3 -c 'import calc; print(calc.add(2, 2))'"))
    assert (checked.status, checked.stdout) == (SandboxStatus.OK, b"4\n"), (checked.reason, checked.stderr)


def test_unreadable_files_and_dirs_are_still_packed(sandbox: Sandbox) -> None:
    command = "echo s > secret; chmod 000 secret; mkdir -p d/e; echo y > d/e/f; chmod 000 d/e; chmod 000 d"
    left = sh(sandbox, snapshot(), command)
    assert left.status == SandboxStatus.OK
    assert left.workspace_kept
    got = members(left.snapshot)
    assert got["secret"] == ("f", b"s\n", 0o644)
    assert got["d/e/f"] == ("f", b"y\n", 0o644)
