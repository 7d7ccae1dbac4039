"""What the soak records of the pipeline's processes: resident memory and open fds (from /proc) and consumer lag
(from each process's own /metrics), and the slope of a series per hour (least squares).

Why "long-lived members": a pipeline process is a supervisor and the ``rewardstream`` process under it in one
process group, with helpers such as a sandbox fork server; short sandbox runs join that group for a moment. A
leak lives in the long-lived processes, and a run that happens to be alive at one sample would only add noise,
so a process's RSS and fds sum the group members that were already alive when the measured phase began.
"""

from __future__ import annotations

import os
import statistics
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from infra.local.process import group_members
from rewardstream.pipeline import Pipeline

LAG_METRIC = "rewardstream_consumer_lag"


@dataclass
class ProcessProbe:
    """One pipeline process: its pid (from its pid file), /metrics URL and the members it started with."""

    name: str
    pid: int
    metrics: str | None
    baseline: set[int] = field(default_factory=set)

    def begin(self) -> None:
        """Mark the long-lived members: those alive now."""
        self.baseline = set(group_members(self.pid))

    def rss_mb_and_fds(self) -> tuple[float, int]:
        """Resident MiB and open fds summed over the long-lived members still alive."""
        rss_kb, fds = 0, 0
        for pid in sorted(self.baseline & set(group_members(self.pid))):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                fds += len(os.listdir(f"/proc/{pid}/fd"))
            except OSError:  # exited between the listing and the read
                continue
            rss_kb += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        return rss_kb / 1024, fds

    def exited(self) -> list[int]:
        """Long-lived members gone since the start (a crashed, restarted process; a recycled helper)."""
        return sorted(self.baseline - set(group_members(self.pid)))

    def lag(self) -> int | None:
        """Messages behind the high watermarks over its partitions, as it reports them (None: it has no lag)."""
        if self.metrics is None:
            return None
        try:
            with urllib.request.urlopen(self.metrics, timeout=5) as response:  # noqa: S310 - our loopback endpoint
                text = response.read().decode()
        except (urllib.error.URLError, OSError):
            return None
        values = [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == LAG_METRIC]
        return int(sum(values)) if values else None


def probes(pipeline: Pipeline) -> list[ProcessProbe]:
    """A probe of every process the pipeline runs (pid files via ``Pipeline.status``); an error if one is down."""
    out = []
    for name, state in pipeline.status().items():
        if state["pid"] is None:
            raise RuntimeError(f"pipeline process {name} is not running")
        out.append(ProcessProbe(name, int(state["pid"]), state["metrics"]))
    return out


def slope_per_hour(seconds: list[float], values: list[float]) -> float:
    """Least-squares slope of ``values`` against time, per hour (0 with fewer than 3 points)."""
    if len(seconds) < 3 or len(set(seconds)) < 2:
        return 0.0
    return statistics.linear_regression([s / 3600 for s in seconds], values).slope
