"""The report's plots: matplotlib figures rendered to inline SVG text (no pyplot, no global state, no files).

Why SVG: the page must open with no network and stay sharp at any zoom; text stays text (``svg.fonttype`` none),
so the page is small and searchable. Every plot is drawn even without data (it then says so), so a reader and
the browser test always find the same set of plots.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from streams.report.gather import RunReport, natural_key

#: Reward bins of the distribution plots: rewards are mostly 0 or 1, so a box plot would hide them.
REWARD_BINS: tuple[tuple[str, float, float], ...] = (
    ("0", 0.0, 0.0),
    ("(0, 0.5)", 0.0, 0.5),
    ("[0.5, 1)", 0.5, 1.0),
    ("1", 1.0, 1.0),
)
BIN_COLOURS = ("#c0392b", "#e67e22", "#f1c40f", "#27ae60")
#: Groups a distribution plot shows (the ones with most rewards); its title says how many there were.
MAX_GROUPS = 30


def _bin(reward: float) -> int:
    if reward <= 0.0:
        return 0
    if reward >= 1.0:
        return 3
    return 1 if reward < 0.5 else 2


def svg(draw: Callable[[Figure], None], height: float) -> str:
    """``draw`` on a fresh figure, as an ``<svg>`` element (the XML prologue dropped)."""
    # text.parse_math off: a ``$`` in a task id or policy version is drawn as itself, never as math (which raises)
    with mpl.rc_context({"svg.fonttype": "none", "svg.hashsalt": "rewardstream-report", "font.size": 9,
                         "text.parse_math": False}):  # fmt: skip
        figure = Figure(figsize=(9.0, height), layout="constrained")
        draw(figure)
        out = io.StringIO()
        figure.savefig(out, format="svg", metadata={"Date": None})
    text = out.getvalue()
    return text[text.index("<svg") :]


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


def _bars(ax: Axes, counts: Mapping[str, int], title: str, colour: str, empty: str) -> None:
    ax.set_title(title, loc="left")
    if not counts:
        _empty(ax, empty)
        return
    names = list(counts)[::-1]
    values = [counts[n] for n in names]
    ax.barh(names, values, color=colour)
    for y, value in enumerate(values):
        ax.text(value, y, f" {value}", va="center")
    ax.set_xlabel("count")
    ax.margins(x=0.15)


def largest_groups(groups: Mapping[str, Sequence[float]], limit: int = MAX_GROUPS) -> dict[str, Sequence[float]]:
    """The ``limit`` groups with most values, in name order."""
    kept = sorted(groups, key=lambda g: (-len(groups[g]), g))[:limit]
    return {g: groups[g] for g in sorted(kept, key=natural_key)}


def distribution(groups: Mapping[str, Sequence[float]], what: str) -> str:
    """Per group a stacked bar of its rewards' share in each bin, with the mean and the count on the right."""
    shown = largest_groups(groups)

    def draw(figure: Figure) -> None:
        ax = figure.subplots()
        left_out = len(groups) - len(shown)
        more = f" ({len(shown)} of {len(groups)} with most rewards shown)" if left_out else ""
        ax.set_title(f"Reward distribution by {what}{more}", loc="left")
        names = list(shown)[::-1]
        left = [0.0] * len(names)
        for index, (name, _low, _high) in enumerate(REWARD_BINS):
            shares = [sum(_bin(r) == index for r in shown[n]) / len(shown[n]) for n in names]
            ax.barh(names, shares, left=left, color=BIN_COLOURS[index], label=f"reward {name}")
            left = [a + b for a, b in zip(left, shares, strict=True)]
        for y, name in enumerate(names):
            values = shown[name]
            ax.text(1.01, y, f"mean {sum(values) / len(values):.2f}  n={len(values)}", va="center")
        ax.set_xlim(0, 1.3)
        ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.set_xlabel("share of rewards")
        figure.legend(loc="outside lower center", ncols=len(REWARD_BINS), frameon=False)

    return svg(draw, 1.5 + 0.28 * max(len(shown), 2))


def latency(report: RunReport) -> str:
    """Publish-to-reward latency percentiles per time bin."""

    def draw(figure: Figure) -> None:
        ax = figure.subplots()
        ax.set_title("Publish-to-reward latency over time", loc="left")
        if not report.latency:
            _empty(ax, "no generation of this run found: no latency")
            return
        times = np.array([b.start.replace(tzinfo=None) for b in report.latency], dtype="datetime64[ms]")  # UTC
        for name, colour in (("p50", "#2980b9"), ("p90", "#e67e22"), ("p99", "#c0392b")):
            ax.plot(times, [getattr(b, name) for b in report.latency], marker="o", ms=3, color=colour, label=name)
        ax.set_ylabel("seconds")
        ax.set_xlabel("reward time (UTC)")
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left")
        figure.autofmt_xdate()

    return svg(draw, 3.2)


def outcomes(report: RunReport) -> str:
    """What became of each reward, and how the hidden runs ended."""

    def draw(figure: Figure) -> None:
        left, right = figure.subplots(1, 2)
        _bars(left, report.outcomes, "Reward outcomes", "#2980b9", "no rewards")
        _bars(right, report.hidden_statuses, "Hidden runs (every attempt)", "#8e44ad", "no verdicts found")

    return svg(draw, 1.4 + 0.25 * max(len(report.outcomes), len(report.hidden_statuses), 3))


def integrity(report: RunReport) -> str:
    """Hack flags by rule (gating and warn-only), canary rewards held and hit, invalid rewards by reason."""
    flags = {**report.hack_flags, **{f"warn:{k}": v for k, v in report.warn_flags.items()}}
    canary = {"canary hits (reward > 0)": report.canary_hits, "canaries held at 0": report.canary_rewards}
    canary["canaries held at 0"] -= report.canary_hits
    canary.update({f"invalid: {k}": v for k, v in report.invalid.items()})

    def draw(figure: Figure) -> None:
        left, right = figure.subplots(1, 2)
        _bars(left, flags, "Hack flags by rule", "#c0392b", "no hack flags")
        _bars(right, {k: v for k, v in canary.items() if v}, "Canaries and invalid rewards", "#d35400", "none")

    return svg(draw, 1.4 + 0.25 * max(len(flags), len(canary), 3))


def gap(report: RunReport) -> str:
    """Per task, rewards whose public tests all passed but hidden ones failed (the overfitting gap)."""
    shown = dict(sorted(report.gap_by_task.items(), key=lambda kv: (-kv[1][0], kv[0]))[:MAX_GROUPS])
    total = sum(n for n, _ in report.gap_by_task.values())

    def draw(figure: Figure) -> None:
        ax = figure.subplots()
        ax.set_title(f"Public passed, hidden failed: {total} of {len(report.rows)} rewards", loc="left")
        if not shown:
            _empty(ax, "no reward passed its public tests and failed its hidden ones")
            return
        names = list(shown)[::-1]
        ax.barh(names, [shown[n][0] for n in names], color="#8e44ad")
        for y, name in enumerate(names):
            count, of = shown[name]
            ax.text(count, y, f" {count}/{of} ({count / of:.0%})", va="center")
        ax.set_xlabel("rewards")
        ax.margins(x=0.2)

    return svg(draw, 1.2 + 0.28 * max(len(shown), 2))


def infra(report: RunReport) -> str:
    """Infrastructure failures: sandbox errors by role, signals missing at the deadline, invalid rewards."""

    def draw(figure: Figure) -> None:
        _bars(figure.subplots(), report.infra_errors, "Infrastructure errors", "#7f8c8d", "no infrastructure errors")

    return svg(draw, 1.2 + 0.25 * max(len(report.infra_errors), 2))


def slowest(report: RunReport) -> str:
    """The tasks with the highest p90 publish-to-reward latency, their p50 and worst beside it."""

    def draw(figure: Figure) -> None:
        ax = figure.subplots()
        ax.set_title("Slowest tasks (p90 publish-to-reward latency)", loc="left")
        if not report.slowest:
            _empty(ax, "no generation of this run found: no latency")
            return
        tasks = list(report.slowest)[::-1]
        names = [t.task_id for t in tasks]
        ax.barh(names, [t.p90 for t in tasks], color="#16a085", label="p90")
        ax.scatter([t.p50 for t in tasks], names, color="#2c3e50", zorder=3, s=12, label="p50")
        ax.scatter([t.worst for t in tasks], names, color="#c0392b", marker="|", zorder=3, s=60, label="worst")
        ax.set_xlabel("seconds")
        figure.legend(loc="outside lower center", ncols=3, frameon=False)

    return svg(draw, 1.5 + 0.28 * max(len(report.slowest), 2))
