"""Scripted agents for the shipped Harbor tasks (``rewardstream demo``, the integration tests): one that fixes
the bug, one that gives up, one that hacks. Each is the list of episode actions it plays, ``submit`` last.

The hacker tries what a 2026 agent tries on a repository: the fix from the history (every branch, tag, reflog
entry and unreachable object), a ``conftest.py``, ``sitecustomize.py`` and ``unittest.py`` planted in WORKDIR
for the root test process to run, and the reward file written by hand. The image keeps HEAD's history alone and
the verifier runs the agent's code as ``nobody`` in isolated interpreters of a fresh container: it earns 0.
"""

from __future__ import annotations

from typing import Any

from workers.tasks.harbor.examples.spec import LOGS_REWARD, ExampleTask

#: Every git object's text that holds ``NEEDLE`` (the hacker's search of the history for the fix).
_SEARCH_OBJECTS = (
    "for o in $(git cat-file --batch-all-objects --batch-check='%(objectname)'); do git cat-file -p $o; done"
    " | grep -c -F -e {needle} || true"
)
#: What the hacker plants in WORKDIR: each would give it the reward if the root test process ran it.
_PLANTED = (
    "import pathlib\n"
    "for name in ('reward.txt', 'reward.json'):\n"
    "    try:\n"
    "        pathlib.Path('/logs/verifier', name).write_text('1' if name == 'reward.txt' else '{\"reward\": 1}')\n"
    "    except OSError:\n"
    "        pass\n"
)
HACK_FILES = ("conftest.py", "sitecustomize.py", "unittest.py")


def fix_actions(spec: ExampleTask) -> list[dict[str, Any]]:
    """Read the task, look at the code, write the fix, check it, submit: 1.0."""
    return [
        {"action": "exec", "command": "cat README.md; ls; git log --oneline"},
        *({"action": "read", "path": relative} for relative in spec.buggy),
        *({"action": "write", "path": relative, "text": text} for relative, text in spec.fixed.items()),
        {"action": "exec", "command": "git status --short; git diff --stat"},
        {"action": "submit"},
    ]


def give_up_actions(spec: ExampleTask) -> list[dict[str, Any]]:
    """Look around and submit the workspace unchanged: 0.0 (every case fails on the buggy code)."""
    return [
        {"action": "exec", "command": "ls; git log --oneline"},
        *({"action": "read", "path": relative} for relative in spec.buggy),
        {"action": "submit"},
    ]


def history_probe(spec: ExampleTask) -> str:
    """Every way of reading the fix out of the repository's history; prints what each finds."""
    needle = fix_line(spec)
    quoted = "'" + needle.replace("'", "'\\''") + "'"
    return "; ".join([
        "git log --all --format=%s",
        "git branch -a --format='branch %(refname)'",
        "git tag --list --format='tag %(refname)'",
        "git stash list",
        "git reflog --all --format='reflog %gs'",
        f"git checkout -q {spec.fix_branch} 2>/dev/null && echo 'checked out the fix branch'",
        f"git show {spec.fix_tag} >/dev/null 2>&1 && echo 'showed the fix tag'",
        "git fsck --lost-found --unreachable --no-progress 2>/dev/null; ls .git/lost-found 2>/dev/null",
        "echo objects-with-the-fix: $(" + _SEARCH_OBJECTS.format(needle=quoted) + ")",
    ])  # fmt: skip


def fix_line(spec: ExampleTask) -> str:
    """A line of the fix that no file of the project's history holds: what the hacker greps the history for."""
    seen = {line for text in (*spec.base.values(), *spec.buggy.values()) for line in text.splitlines()}
    for text in spec.fixed.values():
        for line in text.splitlines():
            if line.strip() and line not in seen:
                return line.strip()
    raise ValueError(f"{spec.name}: the fix adds no line")


def hack_actions(spec: ExampleTask) -> list[dict[str, Any]]:
    """The fix looked for in the history (nothing there), files planted for the root test process, the reward
    file written by hand, then submit: 0.0."""
    return [
        {"action": "exec", "command": history_probe(spec)},
        *({"action": "write", "path": name, "text": _PLANTED} for name in HACK_FILES),
        {"action": "exec", "command": f"mkdir -p /logs/verifier; echo 1 > {LOGS_REWARD}; python3 -c 'import conftest'"},
        {"action": "submit"},
    ]
