"""The README's episode snippet is Python that opens a task the repo ships (a reader can run it as written)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from workers.tasks.swe import swe_tasks

README = Path(__file__).resolve().parents[4] / "README.md"


def test_the_episode_snippet_parses_and_opens_a_shipped_task() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    snippet = next(b for b in blocks if "EpisodeClient" in b)
    ast.parse(snippet)
    opened = re.findall(r'client\.open\("([^"]+)"\)', snippet)
    assert opened, snippet
    shipped = {t.task_id for t in swe_tasks()}
    assert set(opened) <= shipped, f"the README opens {opened}, the repo ships {sorted(shipped)}"
