"""The codec benchmark runs and reports both sides (its numbers come from `python -m benchmarks.bench_codec`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from schemas.codec import decode, encode
from schemas.events import GenerationEvent


def _bench() -> ModuleType:
    """benchmarks/ is a script directory, not an installed package: load the file itself."""
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_codec.py"
    spec = importlib.util.spec_from_file_location("bench_codec", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_codec", module)
    spec.loader.exec_module(module)
    return module


def test_benchmark_reports_both_sides_and_ratio() -> None:
    report = _bench().run(n_events=300, rounds=1)
    medians = report["median_events_per_s"]
    assert isinstance(medians, dict)
    assert {"stdlib_json_encode_decode", "rewardstream_encode_decode_validate"} <= set(medians)
    assert isinstance(report["ratio_rewardstream_vs_stdlib"], float)


def test_benchmark_events_are_valid() -> None:
    for event in _bench().make_events(20):
        assert decode(encode(event), GenerationEvent) == event
