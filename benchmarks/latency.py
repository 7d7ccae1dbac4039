"""Latency samples as the benchmarks report them: one call timed in ms, and a list's p50/p99."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def summary(ms: list[float]) -> dict[str, float]:
    """p50, p99 (nearest rank) and count of samples in milliseconds."""
    ordered = sorted(ms)
    return {
        "p50": round(statistics.median(ordered), 2),
        "p99": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
        "n": len(ordered),
    }


def timed(call: Callable[[], object]) -> float:
    """How long ``call()`` took, in milliseconds."""
    t0 = time.perf_counter()
    call()
    return (time.perf_counter() - t0) * 1e3
