"""``rewardstream tasks load DIR`` on a Harbor task as the user runs it (a whole process, start-up included):
the first load on a host, which builds the task's image, next to a second load of the same directory, which
must build nothing, and a ``--no-build`` load (reading and storing alone) as the floor.

Each round makes a task of its own (a nonce in its Dockerfile's RUN line, so neither its image nor docker's build
cache exists yet), times the three loads,
and checks that the second load left the image exactly as the first made it (same id, same creation time).
Every image a round built is removed at the end. Needs dockerd and the local base images (``rewardstream
sandbox bases --build``; a first build of those is not what this measures).

Usage: ``python -m benchmarks.bench_task_images [--rounds 5] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
TIMEOUT_S = 900.0
#: The nonce in the RUN line keeps docker's build cache from serving an earlier round: each build is a first one.
DOCKERFILE = (
    "FROM python:3.11-slim\nRUN pip install six==1.16.0 && echo {nonce} > /nonce\nWORKDIR /app\nCOPY hello.py ./\n"
)
TEST_SH = (
    '#!/bin/bash\n[ "$(rs-as-agent python /app/hello.py)" = hello ] && echo 1 > /logs/verifier/reward.txt '
    "|| echo 0 > /logs/verifier/reward.txt\n"
)


def make_task(root: Path) -> str:
    """A Harbor task directory under ``root`` whose image no earlier round built; its id."""
    task_id = f"bench-{uuid.uuid4().hex[:12]}"
    task = root / task_id
    for part in ("environment", "tests", "solution"):
        (task / part).mkdir(parents=True)
    (task / "task.toml").write_text("[agent]\ntimeout_sec = 300.0\n")
    (task / "instruction.md").write_text("Make /app/hello.py print hello.\n")
    (task / "environment" / "Dockerfile").write_text(DOCKERFILE.format(nonce=uuid.uuid4().hex))
    (task / "environment" / "hello.py").write_text('print("helo")\n')
    (task / "tests" / "test.sh").write_text(TEST_SH)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\necho 'print(\"hello\")' > /app/hello.py\n")
    return task_id


def load(tasks: Path, registry: Path, *extra: str) -> float:
    """Seconds one ``tasks load`` process takes (it must succeed)."""
    argv = [str(BIN / "rewardstream"), "tasks", "load", str(tasks), "--dir", str(registry), *extra]
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"tasks load {' '.join(extra)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return elapsed


def task_images() -> dict[str, str]:
    """Every ``rs-task/*`` tag on this host -> its image id and creation time."""
    listing = ["docker", "images", "--filter", "reference=rs-task/*"]
    fields = "{{.Repository}}:{{.Tag}} {{.ID}} {{.CreatedAt}}"
    out = subprocess.run([*listing, "--format", fields], capture_output=True, text=True, check=True, timeout=60).stdout
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.splitlines() if line.strip()}


def round_(work: Path) -> dict[str, float]:
    """One round: a new task loaded without building, built (first load), then loaded again."""
    tasks = work / uuid.uuid4().hex
    make_task(tasks)
    before = task_images()
    floor = load(tasks, work / "floor", "--no-build")
    first = load(tasks, work / "reg")
    built = {tag: info for tag, info in task_images().items() if tag not in before}
    if len(built) != 1:
        raise SystemExit(f"the first load made {len(built)} task images, not 1")
    second = load(tasks, work / "reg")
    after = task_images()
    tag, info = next(iter(built.items()))
    if after.get(tag) != info:
        raise SystemExit(f"the second load changed {tag}: {info} -> {after.get(tag)}")
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=True, timeout=120)
    return {"no_build": floor, "first": first, "second": second}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args(argv)
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="rs-bench-images-") as tmp:
        for number in range(1, args.rounds + 1):
            rounds.append(round_(Path(tmp)))
            row = rounds[-1]
            print(f"round {number}: --no-build {row['no_build']:.2f} s, first load (builds) {row['first']:.2f} s, "
                  f"second load {row['second']:.2f} s")  # fmt: skip
    report: dict[str, Any] = {
        name: statistics.median(r[name] for r in rounds) for name in ("no_build", "first", "second")
    }
    report["second_vs_no_build"] = statistics.median(r["second"] / r["no_build"] for r in rounds)
    report["first_vs_second"] = statistics.median(r["first"] / r["second"] for r in rounds)
    report["rounds"] = rounds
    print(
        f"medians: --no-build {report['no_build']:.2f} s, first load {report['first']:.2f} s, second load "
        f"{report['second']:.2f} s; the second load takes {report['second_vs_no_build']:.2f}x a --no-build load "
        f"(median of round ratios), the first {report['first_vs_second']:.1f}x the second"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
