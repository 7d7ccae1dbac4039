"""The report as one self-contained HTML page: inline SVG plots, inline CSS, no script, nothing fetched.

Why no script and no external reference: the page is mailed, attached to tickets and opened offline; a
Content-Security-Policy of ``default-src 'none'`` (styles inline only) makes the browser refuse any fetch, so a
page that renders at all renders complete. Every text from the events is escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from html import escape

from streams.report import charts
from streams.report.gather import RunReport

#: The plots in page order: (id, heading, how to draw it). The browser test finds each id.
PLOTS: tuple[tuple[str, str, Callable[[RunReport], str]], ...] = (
    ("reward-by-task", "Reward by task", lambda r: charts.distribution(r.by("task_id"), "task")),
    (
        "reward-by-policy",
        "Reward by policy version",
        lambda r: charts.distribution(r.by("checkpoint"), "policy version (the checkpoint that wrote the code)"),
    ),
    ("latency", "Latency over time", charts.latency),
    ("outcomes", "Outcomes", charts.outcomes),
    ("integrity", "Hack flags and canaries", charts.integrity),
    ("gap", "Public vs hidden", charts.gap),
    ("infra", "Infrastructure errors", charts.infra),
    ("slowest", "Slowest tasks", charts.slowest),
)

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1000px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.9em}td,th{padding:.2em .8em;text-align:left;border-bottom:1px solid #eee}
td.n{text-align:right;font-variant-numeric:tabular-nums}figure{margin:0}figure svg{width:100%;height:auto}
.note{color:#666;font-size:.85em}
"""


def _summary(report: RunReport) -> list[tuple[str, str]]:
    rows = report.rows
    mean = sum(r.reward for r in rows) / len(rows)
    valid = [r for r in rows if r.valid is not None]
    return [
        ("rewards", str(len(rows))),
        ("mean reward", f"{mean:.3f}"),
        ("tasks", str(len({r.task_id for r in rows}))),
        ("policy versions", str(len({r.checkpoint for r in rows}))),
        ("first / last reward", f"{rows[0].at:%Y-%m-%d %H:%M:%S} / {rows[-1].at:%Y-%m-%d %H:%M:%S} UTC"),
        ("reward policies", ", ".join(report.reward_policies)),
        ("hack-flagged rewards", str(sum(bool(r.hacks) for r in rows))),
        ("canary hits", f"{report.canary_hits} of {report.canary_rewards} canary rewards"),
        (
            "valid for training",
            f"{sum(r.valid is True for r in valid)} of {len(valid)} that say" if valid else "not stated (rewards 1.0)",
        ),
        ("duplicate rewards ignored", str(report.duplicates)),
    ]


def _table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]], numeric_from: int = 1) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{escape(c)}</td>' if i >= numeric_from else f"<td>{escape(c)}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _slowest_table(report: RunReport) -> str:
    if not report.slowest:
        return ""
    rows = [(t.task_id, str(t.count), f"{t.p50:.2f}", f"{t.p90:.2f}", f"{t.worst:.2f}") for t in report.slowest]
    return _table(("task", "rewards", "p50 s", "p90 s", "worst s"), rows)


def render(report: RunReport, now: datetime | None = None) -> str:
    """The whole page."""
    made = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S UTC")
    scanned = ", ".join(f"{topic} {count}" for topic, count in report.scanned.items()) or "-"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>rewardstream run {escape(report.run_id)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Run {escape(report.run_id)}</h1>",
        f'<p class="note">made {made}; messages read: {escape(scanned)}</p>',
        _table(("", ""), _summary(report), numeric_from=2),
    ]
    for plot_id, heading, draw in PLOTS:
        parts.append(f'<h2>{escape(heading)}</h2><figure class="plot" id="plot-{plot_id}">{draw(report)}</figure>')
        if plot_id == "slowest":
            parts.append(_slowest_table(report))
    parts.append("</body></html>")
    return "\n".join(parts)
