"""A saturated host for the tests and benchmarks that show verdicts do not depend on it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: Busy loops per core: every core has two runnable processes besides whatever is graded.
HOGS_PER_CORE = 2


@contextmanager
def busy_host() -> Iterator[int]:
    """``HOGS_PER_CORE`` busy loops per core while inside (plain loops of our own, never candidate code);
    yields how many."""
    count = HOGS_PER_CORE * (os.cpu_count() or 2)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield count
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(timeout=30)
