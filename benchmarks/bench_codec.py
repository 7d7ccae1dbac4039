"""Codec throughput: GenerationEvents/s through encode + decode + validate, next to stdlib json.

Why: every worker decodes every generation, so validation must not cost more than plain JSON would.
The stdlib row does encode + decode only (no validation); the rewardstream row does encode + decode +
full validation. Both run in this one process on one core (pinned where the OS allows), interleaved, and
the medians of several rounds are compared.

Run: ``.venv/bin/python -m benchmarks.bench_codec [--events N] [--rounds R] [--json]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import orjson

from schemas.codec import decode, encode
from schemas.events import GenerationEvent

_CODE = '''def has_close_elements(numbers: list[float], threshold: float) -> bool:
    """Check if in given list of numbers, are any two numbers closer to each other than threshold."""
    for idx, elem in enumerate(numbers):
        for idx2, elem2 in enumerate(numbers):
            if idx != idx2:
                distance = abs(elem - elem2)
                if distance < threshold:
                    return True
    return False
'''


def make_events(n: int) -> list[GenerationEvent]:
    """Realistic one-shot generations (about 0.8 KB each on the wire)."""
    now = datetime(2025, 1, 1, tzinfo=UTC)
    return [
        GenerationEvent(
            generation_id=f"gen-{i:08d}",
            episode_id=f"gen-{i:08d}",
            run_id="run-2025-01-01-a",
            task_id=f"HumanEval/{i % 164}",
            created_at=now,
            turn=0,
            sample_index=i % 8,
            group_id=f"grp-{i // 8:06d}",
            policy_version="step-1200",
            code=_CODE + f"# sample {i}\n",
            metadata={"trainer": "trl", "temperature": "0.8"},
        )
        for i in range(n)
    ]


def bench_rewardstream(events: Sequence[GenerationEvent]) -> float:
    """Seconds to encode, decode and validate every event with the rewardstream codec."""
    start = time.perf_counter()
    for event in events:
        decode(encode(event), GenerationEvent)
    return time.perf_counter() - start


def bench_stdlib(dicts: Sequence[dict[str, object]]) -> float:
    """Seconds to json.dumps + json.loads every event dict (no validation)."""
    start = time.perf_counter()
    for d in dicts:
        json.loads(json.dumps(d).encode("utf-8"))
    return time.perf_counter() - start


def bench_orjson_only(dicts: Sequence[dict[str, object]]) -> float:
    """Seconds to orjson.dumps + orjson.loads every event dict (no validation), for reference."""
    start = time.perf_counter()
    for d in dicts:
        orjson.loads(orjson.dumps(d))
    return time.perf_counter() - start


def bench_orjson_then_validate(events: Sequence[GenerationEvent]) -> float:
    """Seconds for the alternative design: orjson.dumps(model_dump) + model_validate(orjson.loads)."""
    start = time.perf_counter()
    for event in events:
        raw = orjson.dumps(event.model_dump(mode="json"))
        GenerationEvent.model_validate(orjson.loads(raw), strict=False)
    return time.perf_counter() - start


def _pin_one_core() -> tuple[str, set[int] | None]:
    """Pin to one CPU so the comparison is per core; return its name and the affinity to restore."""
    try:
        before = os.sched_getaffinity(0)
        cpu = min(before)
        os.sched_setaffinity(0, {cpu})
    except (AttributeError, OSError):
        return "unpinned", None
    return f"cpu {cpu}", before


def run(n_events: int, rounds: int) -> dict[str, object]:
    """Interleave the variants for ``rounds`` rounds; return medians in events/s and the ratio."""
    core, before = _pin_one_core()
    try:
        return _run(n_events, rounds, core)
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)


def _run(n_events: int, rounds: int, core: str) -> dict[str, object]:
    events = make_events(n_events)
    dicts = [e.model_dump(mode="json") for e in events]
    variants: dict[str, Callable[[], float]] = {
        "stdlib_json_encode_decode": lambda: bench_stdlib(dicts),
        "rewardstream_encode_decode_validate": lambda: bench_rewardstream(events),
        "orjson_encode_decode": lambda: bench_orjson_only(dicts),
        "orjson_then_model_validate": lambda: bench_orjson_then_validate(events),
    }
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():  # warm-up
        fn()
    gc.disable()
    try:
        for _ in range(rounds):
            for name, fn in variants.items():
                rates[name].append(n_events / fn())
    finally:
        gc.enable()
    medians = {name: statistics.median(r) for name, r in rates.items()}
    ratio = medians["rewardstream_encode_decode_validate"] / medians["stdlib_json_encode_decode"]
    return {
        "core": core,
        "events_per_round": n_events,
        "rounds": rounds,
        "bytes_per_event": len(encode(events[0])),
        "median_events_per_s": {k: round(v) for k, v in medians.items()},
        "ratio_rewardstream_vs_stdlib": round(ratio, 2),
        "python": sys.version.split()[0],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report; exit 1 if validation is slower than stdlib encode+decode."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    report = run(args.events, args.rounds)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"GenerationEvent codec benchmark ({report['core']}, {report['events_per_round']} events x "
            f"{report['rounds']} rounds, {report['bytes_per_event']} B/event, Python {report['python']})"
        )
        medians = report["median_events_per_s"]
        assert isinstance(medians, dict)
        for name, rate in medians.items():
            print(f"  {name:<38} {rate:>10,} events/s (median)")
        print(f"  ratio rewardstream / stdlib json: {report['ratio_rewardstream_vs_stdlib']}x")
    ratio = report["ratio_rewardstream_vs_stdlib"]
    assert isinstance(ratio, float)
    return 0 if ratio >= 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
