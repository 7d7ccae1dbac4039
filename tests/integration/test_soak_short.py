"""The CI soak: ``benchmarks/soak.py`` for 2.5 minutes (after a 20 s calibration), run as a user runs it.

Why a subprocess: the soak sets its namespace in its own environment (the pipeline processes inherit it) and
starts the processes ``rewardstream up --pipeline`` starts; none of that may leak into the test session.

Limits of the short run: the 30-minute soak's RSS limit (50 MB/h) fitted over 1.75 minutes would fail on 1.5 MB
of noise (an allocator arena, a librdkafka buffer), so the short run states its own: RSS under 600 MB/h per
process (17 MB over the fitted window: a leak of a few KB per operation at the paced rate still crosses it)
and fds under 240/h (7 fds over the window: a leak of one fd per request crosses it by hundreds). Lost or
duplicate rewards and observations have no tolerance in either.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ARGS = ["--minutes", "2.5", "--calibrate-s", "20", "--interval-s", "5", "--warmup-minutes", "0.75",
        "--rss-limit-mb-h", "600", "--fd-limit-h", "240"]  # fmt: skip


@pytest.mark.timeout(540)
def test_short_soak_loses_nothing_and_leaks_nothing(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "soak.py"), *ARGS, "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=500, check=False,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert lines, f"no verdict (exit {done.returncode}); stderr:\n{done.stderr[-4000:]}"
    verdict = json.loads(lines[-1])
    once = verdict["exactly_once"]
    assert done.returncode == 0, (verdict["failures"], once, done.stderr[-4000:])
    assert verdict["ok"], verdict["failures"]
    assert once["generations"] > 0, once
    assert once["actions"] > 0, once
    assert once["rewards"] == once["generations"], once
    assert once["observations"] >= once["actions"], once
    assert (tmp_path / "soak.csv").stat().st_size > 0
    assert (tmp_path / "soak.png").stat().st_size > 0
