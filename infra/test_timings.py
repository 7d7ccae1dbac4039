"""Where the suite's time goes, per file: ``make test`` prints it after its three phases so every CI run
records its slowest files next to pytest's slowest tests (``--durations``) and the suite's growth stays
visible. Reads the phases' junit reports; a report that is missing (a phase that crashed) is named, not fatal.

    python -m infra.test_timings var/test-reports/*.xml
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

TOP = 15


def file_seconds(report: Path) -> tuple[float, dict[str, float]]:
    """(wall seconds of the phase as pytest reports it, summed test seconds per file) of one junit report."""
    root = ET.parse(report).getroot()  # noqa: S314 - pytest wrote it in this run
    per_file: dict[str, float] = defaultdict(float)
    wall = 0.0
    for suite in root.iter("testsuite"):
        wall += float(suite.get("time", "0"))
        for case in suite.iter("testcase"):
            per_file[_file_of(case.get("classname", ""))] += float(case.get("time", "0"))
    return wall, dict(per_file)


def _file_of(classname: str) -> str:
    """``tests/a/test_b.py`` of junit's ``tests.a.test_b`` or ``tests.a.test_b.TestClass``."""
    parts = classname.split(".")
    end = next((i + 1 for i, part in enumerate(parts) if part.startswith("test_")), len(parts))
    return "/".join(parts[:end]) + ".py"


def summary(reports: list[Path]) -> str:
    lines = []
    for report in reports:
        if not report.is_file():
            lines.append(f"{report}: no report (the phase did not finish)")
            continue
        wall, per_file = file_seconds(report)
        total = sum(per_file.values())
        lines.append(f"{report.stem}: {wall:.0f}s wall, {total:.0f}s of tests in {len(per_file)} files; slowest files:")
        for name, seconds in sorted(per_file.items(), key=lambda kv: -kv[1])[:TOP]:
            lines.append(f"  {seconds:7.1f}s  {name}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    print(summary([Path(a) for a in argv]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
