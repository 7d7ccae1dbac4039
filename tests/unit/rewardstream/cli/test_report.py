"""``rewardstream report`` keeps its plotting library to itself: registering every command imports no matplotlib."""

from __future__ import annotations

import subprocess
import sys


def test_no_command_module_imports_the_plotting_library() -> None:
    probe = (
        "import sys\nfrom rewardstream.cli.main import _register\n_register()\n"
        "print('rewardstream.cli.report' in sys.modules, 'matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["True", "False"]


def test_report_help_names_its_options() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rewardstream", "report", "--help"], capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "--run-id" in result.stdout
    assert "--out" in result.stdout
