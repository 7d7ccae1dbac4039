"""Reward processors scaled out: rewards/s of 1, 2, ... ``rewardstream reward run`` processes of one group on the
same 8 input partitions, alternating, so the figure past one process is measured, not assumed.

Why: one processor is CPU-bound in its Python work (docs/benchmarks.md), and the design's way past it is more
processes, each owning some partitions of the co-partitioned inputs (the range assignor). On this 2-core
machine the broker and the reader share the cores with them, so the figures are what the machine allows, not
the design's limit.

    python -m benchmarks.reward_scaling [--rewards 60000] [--counts 1,2] [--rounds 3]

Needs the local services (``rewardstream up``). Prints one JSON object: per count, the runs' rewards/s and
their median, and the efficiency of each count against ``count`` times one process's median.
"""

from __future__ import annotations

import argparse
import json
import sys
from statistics import median
from typing import Any

from benchmarks.capacity_ceilings import reward_processor_rps
from benchmarks.capacity_floor import load, median_or_none


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--rewards", type=int, default=60_000, help="generations each run drains (rebalances included)")
    p.add_argument("--counts", default="1,2", help="processes of each run, alternating")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")]
    if not counts or min(counts) < 1:
        p.error("--counts: positive process counts, e.g. 1,2")
    runs: dict[int, list[dict[str, Any]]] = {c: [] for c in counts}
    for _ in range(args.rounds):
        for count in counts:
            got = {**reward_processor_rps(args.rewards, processors=count), "load": round(load(), 1)}
            runs[count].append(got)
            print(json.dumps(got), file=sys.stderr, flush=True)
    medians = {c: median(r["rps"] for r in rows) for c, rows in runs.items()}
    base = medians[min(counts)] / min(counts)
    print(json.dumps({
        "rewards": args.rewards,
        "rps": {str(c): [r["rps"] for r in rows] for c, rows in runs.items()},
        "median_rps": {str(c): m for c, m in medians.items()},
        "efficiency": {str(c): round(m / (c * base), 2) for c, m in medians.items()},
        "steady_main_thread_us_per_reward": {
            str(c): median_or_none([r["steady_main_thread_us_per_reward"] for r in rows]) for c, rows in runs.items()
        },
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
