"""The host a worker runs on, as gauges: memory, disk and run-queue pressure of sandbox hosts.

Why in the worker (not a node exporter): the sandbox roles are the ones a full host hurts, every one already
serves /metrics, and alert rules then see the host's state beside the role and instance it slows down.
Read at scrape time from /proc and statvfs: nothing runs between scrapes.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


class HostCollector(Collector):
    """Host memory available, free disk per path, and the 1-minute load per CPU."""

    def __init__(self, role: str, paths: tuple[str, ...] = ()) -> None:
        self.role = role
        self.paths = tuple(dict.fromkeys(paths or ("/", tempfile.gettempdir())))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        memory = GaugeMetricFamily(
            "rewardstream_host_memory_available_ratio", "MemAvailable / MemTotal of the host", labels=["role"]
        )
        ratio = memory_available_ratio()
        if ratio is not None:
            memory.add_metric([self.role], ratio)
        yield memory
        disk = GaugeMetricFamily(
            "rewardstream_host_disk_free_ratio", "Free space / size of the filesystem holding a path the sandboxes "
            "write to", labels=["role", "path"],
        )  # fmt: skip
        for path in self.paths:
            try:
                stat = os.statvfs(path)
            except OSError:
                continue
            if stat.f_blocks > 0:
                disk.add_metric([self.role, path], stat.f_bavail / stat.f_blocks)
        yield disk
        load = GaugeMetricFamily(
            "rewardstream_host_load_per_cpu", "1-minute load average / CPUs: the run queue sandboxes wait in",
            labels=["role"],
        )  # fmt: skip
        load.add_metric([self.role], os.getloadavg()[0] / (os.cpu_count() or 1))
        yield load


def memory_available_ratio(meminfo: Path = Path("/proc/meminfo")) -> float | None:
    """MemAvailable / MemTotal, or None where /proc/meminfo does not say."""
    try:
        fields = dict(line.split(":", 1) for line in meminfo.read_text().splitlines() if ":" in line)
        total = int(fields["MemTotal"].split()[0])
        available = int(fields["MemAvailable"].split()[0])
    except (OSError, KeyError, ValueError, IndexError):
        return None
    return available / total if total > 0 else None
