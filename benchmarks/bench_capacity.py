"""Capacity, measured (issue 27), side by side in one run; prints one JSON object on stdout:

    {"reward_processor_rps", "worker_rps", "episode_steps_rps", "scaling": {"1": rps, "2": ..., "4": ..., "8": ...},
     "concurrent_sandboxes": {"n", "errors", "host_mb_per_sandbox"}}

    .venv/bin/python benchmarks/bench_capacity.py --json [--quick] [--rewards N] [--results N] [--episodes N]
        [--counts 1,2,4,8] [--sandboxes N] [--skip PART,...]

* the control plane's ceilings with grading taken out (``benchmarks.capacity_ceilings``): one reward processor
  (``rewardstream reward run``), one executor worker loop and one episode worker, the last two with the
  BENCHMARK-ONLY no-op runner of ``benchmarks.noop_runner`` injected in their own process;
* scaling (``benchmarks.capacity_scaling``): 1, 2, 4, 8 ``rewardstream worker executor`` processes on 8
  partitions, runs that sleep in real process-backend sandboxes;
* many sandboxes at once (``benchmarks.capacity_sandboxes``): ``--sandboxes`` sleeping sandboxes on this host.

Every part's details (configurations, efficiency, the memory breakdown) go to stderr, one JSON line each; stdout
holds only the contract's object (``--json``; without it a readable summary). Medians of ``--repeats`` for the
ceilings. Needs the local services (Kafka, S3) and the sandbox rootfs. A skipped part's value is null.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python benchmarks/bench_capacity.py``: ``benchmarks.*`` from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.capacity_ceilings import episode_steps_rps, reward_processor_rps, worker_rps
from benchmarks.capacity_sandboxes import concurrent_sandboxes
from benchmarks.capacity_scaling import scaling

PARTS = ("rewards", "worker", "episodes", "scaling", "sandboxes")


def detail(part: str, value: object) -> None:
    print(json.dumps({"part": part, **(value if isinstance(value, dict) else {"value": value})}), file=sys.stderr,
          flush=True)  # fmt: skip


def median_of(part: str, repeats: int, measure: Callable[[], dict[str, Any]]) -> float:
    """The median ``rps`` of ``repeats`` runs of ``measure()``; each run's details to stderr."""
    rates: list[float] = []
    for _ in range(repeats):
        got = measure()
        detail(part, got)
        rates.append(float(got["rps"]))
    return round(statistics.median(rates), 1)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print the contract's JSON object (else a summary)")
    p.add_argument("--quick", action="store_true", help="small sizes everywhere: checks it runs, not a figure")
    p.add_argument("--repeats", type=int, default=3, help="runs of each ceiling (median)")
    p.add_argument("--rewards", type=int, default=20_000, help="generations the reward processor joins")
    p.add_argument("--results", type=int, default=20_000, help="generations the worker loop drains")
    p.add_argument("--loop-concurrency", type=int, default=8, help="the worker loop's runner threads")
    p.add_argument("--loop-buffer", type=int, default=2000, help="its RS_WORKER_MAX_IN_FLIGHT (0: the default)")
    p.add_argument("--episodes", type=int, default=500, help="episodes the episode worker drains")
    p.add_argument("--steps", type=int, default=20, help="exec steps per episode")
    p.add_argument("--episode-concurrency", type=int, default=8)
    p.add_argument("--counts", default="1,2,4,8", help="worker processes to scale over")
    p.add_argument("--concurrency", type=int, default=2, help="sandbox runs at once per scaled process")
    p.add_argument("--rounds", type=int, default=6, help="generations per run slot in the scaling part")
    p.add_argument("--sleep", type=float, default=2.0, help="seconds each scaled run sleeps")
    p.add_argument("--sandboxes", type=int, default=1000, help="sleeping sandboxes at once")
    p.add_argument("--sandbox-processes", type=int, default=4, help="worker-like processes holding them")
    p.add_argument("--hold", type=float, default=0.0, help="seconds every sandbox lives (0: 0.4 s each, >= 60)")
    p.add_argument("--start-rate", type=float, default=0.0, help="sandbox starts/s (0: the host's default)")
    p.add_argument("--skip", default="", help=f"parts to leave out, of {','.join(PARTS)}")
    args = p.parse_args()
    if args.quick:
        args.repeats, args.rewards, args.results, args.episodes, args.steps = 1, 500, 500, 20, 5
        args.counts, args.rounds, args.sleep, args.sandboxes, args.hold = "1,2", 2, 0.5, 20, 20.0
    unknown = set(filter(None, args.skip.split(","))) - set(PARTS)
    if unknown:
        p.error(f"--skip: unknown parts {sorted(unknown)}; the parts are {', '.join(PARTS)}")
    return args


def main() -> None:
    args = parse()
    skip = set(args.skip.split(","))
    out: dict[str, Any] = {"reward_processor_rps": None, "worker_rps": None, "episode_steps_rps": None,
                           "scaling": None, "concurrent_sandboxes": None}  # fmt: skip
    if "rewards" not in skip:
        out["reward_processor_rps"] = median_of("rewards", args.repeats, lambda: reward_processor_rps(args.rewards))
    if "worker" not in skip:
        out["worker_rps"] = median_of("worker", args.repeats, lambda: worker_rps(
            args.results, args.loop_concurrency, max_in_flight=args.loop_buffer))  # fmt: skip
    if "episodes" not in skip:
        out["episode_steps_rps"] = median_of("episodes", args.repeats, lambda: episode_steps_rps(
            args.episodes, args.steps, args.episode_concurrency))  # fmt: skip
    if "scaling" not in skip:
        counts = [int(c) for c in args.counts.split(",")]
        scaled = scaling(counts, args.concurrency, args.rounds, args.sleep)
        detail("scaling", scaled)
        out["scaling"] = {str(row["processes"]): row["rps"] for row in scaled["counts"]}
    if "sandboxes" not in skip:
        many = concurrent_sandboxes(
            args.sandboxes, processes=args.sandbox_processes, start_rate=args.start_rate, hold_s=args.hold
        )
        detail("sandboxes", many)
        out["concurrent_sandboxes"] = {k: many[k] for k in ("n", "errors", "host_mb_per_sandbox")}
    if args.json:
        print(json.dumps(out))
        return
    for key, value in out.items():
        print(f"{key:>22}: {value}")


if __name__ == "__main__":
    main()
