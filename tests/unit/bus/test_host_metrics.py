"""The host's gauges: read from /proc and statvfs at scrape time."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from bus.host_metrics import HostCollector, memory_available_ratio


def test_memory_ratio_is_available_over_total(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       1000 kB\nMemFree:  10 kB\nMemAvailable:    250 kB\n")
    assert memory_available_ratio(meminfo) == pytest.approx(0.25)


def test_memory_ratio_is_none_when_unknown(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 0 kB\n")
    assert memory_available_ratio(meminfo) is None
    assert memory_available_ratio(tmp_path / "absent") is None


def test_collector_reports_each_path_once_and_skips_missing_ones(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    registry.register(HostCollector("verifier", (str(tmp_path), str(tmp_path), str(tmp_path / "gone"))))
    free = registry.get_sample_value("rewardstream_host_disk_free_ratio", {"role": "verifier", "path": str(tmp_path)})
    assert free is not None
    assert 0.0 <= free <= 1.0
    assert registry.get_sample_value("rewardstream_host_disk_free_ratio",
                                     {"role": "verifier", "path": str(tmp_path / "gone")}) is None  # fmt: skip
    load = registry.get_sample_value("rewardstream_host_load_per_cpu", {"role": "verifier"})
    assert load is not None
    assert load >= 0.0
