"""The soak's rows as one PNG: throughput, p99 latency, consumer lag, and RSS and open fds per process, against
time, with the warm-up (left out of the slopes) shaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on a CI machine
import matplotlib.pyplot as plt


def _series(rows: list[dict[str, Any]], column: str) -> list[float]:
    return [float("nan") if r.get(column) in ("", None) else float(r[column]) for r in rows]


def plot(rows: list[dict[str, Any]], names: list[str], warmup_s: float, path: Path) -> None:
    """Five panels sharing the time axis (minutes)."""
    minutes = [r["t_s"] / 60 for r in rows]
    fig, axes = plt.subplots(5, 1, figsize=(10, 16), sharex=True)
    panels = [
        ("answers/s", [("rewards", "rewards_per_s"), ("steps", "steps_per_s"), ("run_code", "run_codes_per_s")]),
        ("p99 latency (ms)", [("reward", "reward_p99_ms"), ("step", "step_p99_ms"), ("run_code", "run_code_p99_ms")]),
        (
            "consumer lag (messages)",
            [(n, f"lag_{n}") for n in names if any(r.get(f"lag_{n}") is not None for r in rows)],
        ),
        ("RSS (MiB)", [(n, f"rss_mb_{n}") for n in names]),
        ("open fds", [(n, f"fds_{n}") for n in names]),
    ]
    for ax, (title, lines) in zip(axes, panels, strict=True):
        for label, column in lines:
            ax.plot(minutes, _series(rows, column), label=label)
        ax.axvspan(0, warmup_s / 60, color="grey", alpha=0.15)
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", ncol=4, loc="upper left")
    axes[-1].set_xlabel("minutes (shaded: warm-up, not in the slopes)")
    fig.suptitle("rewardstream soak")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
