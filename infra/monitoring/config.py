"""The local Prometheus' and Alertmanager's configuration files, generated from what the pipeline runs.

Why generated: the targets are the pipeline's own processes (``rewardstream.pipeline`` knows their ports), so the
scrape config comes from that one source. Every target is job ``rewardstream`` with a ``role`` label, the labels
the rules select on (the chart's ServiceMonitor relabels to the same ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

JOB = "rewardstream"


@dataclass(frozen=True)
class ScrapeTarget:
    """One process to scrape: its role (as its metrics name it) and its /metrics URL."""

    role: str
    url: str

    def address(self) -> tuple[str, str, str]:
        """(scheme, host:port, path) of the URL."""
        parts = urlsplit(self.url)
        return parts.scheme or "http", parts.netloc, parts.path or "/metrics"


@dataclass(frozen=True)
class Intervals:
    """How often Prometheus scrapes and evaluates the rules (tests shorten both)."""

    scrape_s: float = 15.0
    evaluation_s: float = 15.0


def prometheus_config(
    targets: Sequence[ScrapeTarget], rule_files: Sequence[Path], alertmanager: str | None, intervals: Intervals
) -> dict[str, Any]:
    """prometheus.yml: one scrape config per (scheme, path), each target labelled with its role."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for target in targets:
        scheme, address, path = target.address()
        groups.setdefault((scheme, path), []).append({"targets": [address], "labels": {"role": target.role}})
    scrapes = [
        {"job_name": f"{JOB}-{index}" if index else JOB, "scheme": scheme, "metrics_path": path,
         "honor_labels": True, "static_configs": statics,
         "relabel_configs": [{"target_label": "job", "replacement": JOB}]}
        for index, ((scheme, path), statics) in enumerate(sorted(groups.items()))
    ]  # fmt: skip
    config: dict[str, Any] = {
        "global": {
            "scrape_interval": _duration(intervals.scrape_s),
            "scrape_timeout": _duration(min(intervals.scrape_s, 10.0)),
            "evaluation_interval": _duration(intervals.evaluation_s),
        },
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": scrapes,
    }
    if alertmanager is not None:
        parts = urlsplit(alertmanager)
        config["alerting"] = {
            "alertmanagers": [{"scheme": parts.scheme or "http", "static_configs": [{"targets": [parts.netloc]}]}]
        }
    return config


def alertmanager_config() -> dict[str, Any]:
    """alertmanager.yml: alerts grouped by name and role, kept in Alertmanager (its UI and API); a receiver that
    pages someone is the operator's to add (a webhook, e-mail), never a default that sends mail off the host."""
    return {
        "route": {"receiver": "local", "group_by": ["alertname", "role"], "group_wait": "10s",
                  "group_interval": "1m", "repeat_interval": "4h"},
        "receivers": [{"name": "local"}],
    }  # fmt: skip


def _duration(seconds: float) -> str:
    """A Prometheus duration: whole milliseconds."""
    return f"{max(1, round(seconds * 1000))}ms"
