"""The scripted agents of the shipped tasks: the hacker's history probe finds the fix where the history still
holds it (the repository as written, before the image keeps HEAD's alone), so its finding nothing in an image
(tests/integration/test_shipped_tasks.py) means the fix is not there."""

from __future__ import annotations

import subprocess
from pathlib import Path

from workers.tasks.harbor.examples import EXAMPLES, write_tasks
from workers.tasks.harbor.examples.agents import HACK_FILES, fix_actions, fix_line, hack_actions, history_probe


def test_the_history_probe_finds_the_fix_in_an_untrimmed_repository(tmp_path: Path) -> None:
    for path, spec in zip(write_tasks(tmp_path), EXAMPLES, strict=True):
        app = path / "environment" / "app"
        subprocess.run(["git", "-C", str(app), "reset", "-q"], check=True)  # the image's index, rebuilt
        found = subprocess.run(["bash", "-c", history_probe(spec)], cwd=app, capture_output=True, text=True,
                               check=True).stdout.splitlines()  # fmt: skip
        assert f"branch refs/heads/{spec.fix_branch}" in found
        assert f"tag refs/tags/{spec.fix_tag}" in found
        assert "checked out the fix branch" in found
        assert found[-1] == "objects-with-the-fix: 1", found


def test_the_fix_line_is_in_the_fix_alone() -> None:
    for spec in EXAMPLES:
        line = fix_line(spec)
        assert any(line in text for text in spec.fixed.values())
        assert not any(line in text for text in (*spec.base.values(), *spec.buggy.values()))


def test_each_agent_ends_with_submit_and_the_hacker_plants_files_for_root() -> None:
    for spec in EXAMPLES:
        fixing, hacking = fix_actions(spec), hack_actions(spec)
        assert fixing[-1] == hacking[-1] == {"action": "submit"}
        assert {a["path"]: a["text"] for a in fixing if a["action"] == "write"} == spec.fixed
        assert [a["path"] for a in hacking if a["action"] == "write"] == list(HACK_FILES)
