"""The CI timing summary reads pytest's own junit reports: per-file sums, slowest first, a missing part named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from infra.test_timings import file_seconds, summary

ROOT = Path(__file__).resolve().parents[3]


def test_a_real_junit_report_is_summed_per_file(tmp_path: Path) -> None:
    tests = tmp_path / "test_pair.py"
    tests.write_text("import time\ndef test_slow():\n    time.sleep(0.3)\ndef test_fast():\n    pass\n")
    report = tmp_path / "part.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", str(tests)],
        check=False, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    wall, per_file = file_seconds(report)
    assert list(per_file) == ["test_pair.py"], per_file
    assert 0.3 <= per_file["test_pair.py"] <= wall + 0.01
    text = summary([report, tmp_path / "missing.xml"])
    assert "part: " in text
    assert "test_pair.py" in text
    assert "missing.xml: no report (the phase did not finish)" in text


def test_a_test_class_counts_for_its_file(tmp_path: Path) -> None:
    report = tmp_path / "part.xml"
    report.write_text(
        '<testsuites><testsuite time="3.0">'
        '<testcase classname="tests.sandbox.test_x.TestA" name="a" time="1.5"/>'
        '<testcase classname="tests.sandbox.test_x" name="b" time="1.0"/>'
        "</testsuite></testsuites>"
    )
    assert file_seconds(report) == (3.0, {"tests/sandbox/test_x.py": 2.5})
