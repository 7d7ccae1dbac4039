"""``rewardstream tasks examples --out DIR``: the shipped Harbor tasks written where asked, again over a
previous write (each task directory replaced, not merged)."""

from __future__ import annotations

from pathlib import Path

import orjson
from typer.testing import CliRunner

from rewardstream.cli.main import _register, app
from workers.tasks.harbor.directory import is_harbor_task
from workers.tasks.harbor.examples import EXAMPLES


def test_the_shipped_tasks_are_written_where_asked(tmp_path: Path) -> None:
    _register(["tasks"])
    out = tmp_path / "harbor"
    first = CliRunner().invoke(app, ["tasks", "examples", "--out", str(out)])
    assert first.exit_code == 0, first.output
    assert f"wrote {len(EXAMPLES)} Harbor tasks to {out}" in first.output
    stray = out / EXAMPLES[0].name / "environment" / "stray.txt"
    stray.write_text("left from an older write\n")
    again = CliRunner().invoke(app, ["tasks", "examples", "--out", str(out), "--json"])
    assert again.exit_code == 0, again.output
    assert orjson.loads(again.output) == {"out": str(out), "tasks": [spec.name for spec in EXAMPLES]}
    assert not stray.exists()
    assert sorted(p.name for p in out.iterdir() if is_harbor_task(p)) == sorted(spec.name for spec in EXAMPLES)
