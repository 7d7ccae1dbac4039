"""The human-readable episode part of ``rewardstream explain``: what the episode was and its steps (pure).

Why bounded: an episode may have thousands of turns, each with kilobytes of output. At most ``STEPS_SHOWN``
steps are printed (the first and the last halves: how it started and how it ended), each with the first
``OUTPUT_LINES`` lines of its stdout and stderr cut to ``LINE_CHARS``; the output says what it left out
(``--json`` has every step found). Total on purpose: whatever a record held, the formatter prints something
and never raises (explain is what one runs when records are odd).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

#: Most steps printed: the first half and the last half of them.
STEPS_SHOWN = 40
#: Lines of each of a step's stdout and stderr printed.
OUTPUT_LINES = 3
#: Characters of one printed line of output or of an action's summary.
LINE_CHARS = 160


def text_line(value: object, limit: int = LINE_CHARS) -> str:
    """``value`` as one printable line of at most ``limit`` characters (control characters replaced)."""
    text = value if isinstance(value, str) else ("" if value is None else repr(value))
    text = "".join(c if c.isprintable() else ("\\t" if c == "\t" else "\ufffd") for c in text[: limit * 2])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _get(mapping: object, key: str) -> object:
    """``mapping[key]``, or None when ``mapping`` is not a mapping (a section may hold anything)."""
    return mapping.get(key) if isinstance(mapping, Mapping) else None


def _command(command: object) -> str:
    if isinstance(command, list) and all(isinstance(part, str) for part in command):
        return shlex.join(command)
    return text_line(command)


def action_summary(step: Mapping[str, Any]) -> str:
    """``exec python -m pytest``, ``write calc/ops.py (52 bytes)``, ``read calc/ops.py``, ``submit``, ..."""
    kind, detail = step.get("action"), step.get("detail")
    if kind is None:
        return "(no action: the worker ended the episode)"
    if kind == "submit":
        return "submit"
    if not isinstance(detail, Mapping):
        return f"{text_line(kind, 16)} (action not found)"
    size = detail.get("bytes")
    summaries = {
        "exec": lambda: f"exec {_command(detail.get('command'))}",
        "write": lambda: (
            f"write {text_line(detail.get('path'))}" + ("" if size is None else f" ({text_line(size)} bytes)")
        ),
        "read": lambda: f"read {text_line(detail.get('path'))}",
        "open": lambda: f"open {text_line(detail.get('task_id'))}",
        "fork": lambda: f"fork {text_line(detail.get('from_episode'))} at turn {text_line(detail.get('turn'))}",
    }
    summary = summaries.get(kind) if isinstance(kind, str) else None
    return text_line(summary() if summary is not None else kind)


def _outcome(step: Mapping[str, Any]) -> str:
    parts = [text_line(step.get("status"), 32)]
    if step.get("exit_code") is not None:
        parts.append(f"exit {text_line(step.get('exit_code'), 16)}")
    wall = step.get("wall_ms")
    if isinstance(wall, int | float) and not isinstance(wall, bool):
        parts.append(f"{wall:.0f} ms")
    if step.get("content_chars") is not None:
        parts.append(f"read {text_line(step.get('content_chars'), 16)} chars")
    if step.get("ended") is not None:
        parts.append(f"ended: {text_line(step.get('ended'), 32)}")
    return ", ".join(parts)


def _output(name: str, head: object, chars: object, truncated: object) -> list[str]:
    if not isinstance(head, str) or not head:
        return []
    lines = head.splitlines() or [""]
    shown = [f"      {name}: {text_line(line)}" for line in lines[:OUTPUT_LINES]]
    total = chars if isinstance(chars, int) and not isinstance(chars, bool) else len(head)
    if len(lines) > OUTPUT_LINES or total > len(head) or truncated is True:
        shown.append(f"      {name}: ... ({total} chars in all{'; cut by the worker' if truncated is True else ''})")
    return shown


def step_lines(step: object) -> list[str]:
    """One step: its turn, action and outcome, then the head of its output and its reason."""
    if not isinstance(step, Mapping):
        return [f"  (not a step: {text_line(step)})"]
    lines = [f"  turn {text_line(step.get('turn'), 16)}: {action_summary(step)} -> {_outcome(step)}"]
    lines += _output("stdout", step.get("stdout_head"), step.get("stdout_chars"), step.get("stdout_truncated"))
    lines += _output("stderr", step.get("stderr_head"), step.get("stderr_chars"), step.get("stderr_truncated"))
    if step.get("reason"):
        lines.append(f"      reason: {text_line(step.get('reason'))}")
    return lines


def _ended(episode: Mapping[str, Any]) -> str:
    how = {"submitted": "submit", "max_turns": "max_turns (submitted as it was)",
           "episode_timeout": "episode_timeout (submitted as it was)"}  # fmt: skip
    ended = episode.get("ended")
    why = how.get(ended, text_line(ended)) if isinstance(ended, str) else "unknown (no ending observation found)"
    return f"ended: {why}, after {text_line(episode.get('turns'), 16)} turn(s)"


def _workspace(episode: Mapping[str, Any]) -> str:
    workspace = episode.get("workspace")
    size, error = _get(workspace, "size_bytes"), _get(workspace, "size_error")
    known = f"{text_line(size, 24)} bytes" if size is not None else f"size unknown: {text_line(error)}"
    sha = text_line(_get(workspace, "sha256"), 64)
    return f"workspace snapshot: {text_line(_get(workspace, 'url'), 400)} ({known}; sha256 {sha})"


def _images(steps: list[Any]) -> list[str]:
    """The task image(s) an image task's steps ran on, in order of first use (none: a workspace task's)."""
    ids = [_get(step, "image_id") for step in steps]
    seen = list(dict.fromkeys(text_line(i, 80) for i in ids if i is not None))
    if not seen:
        return []
    listed = ", ".join(seen[:STEPS_SHOWN])
    return [f"task image{'s' if len(seen) > 1 else ''} of the steps: {listed}"]


def episode_lines(episode: object) -> list[str]:
    """The episode section as printed lines: at most ``STEPS_SHOWN`` steps, saying how many were left out."""
    if not isinstance(episode, Mapping):
        return [f"episode: {text_line(episode)}"]
    lines = [
        f"episode {text_line(episode.get('episode_id'))}: task {text_line(episode.get('task_id'))}, "
        f"run {text_line(episode.get('run_id'))}, policy {text_line(episode.get('policy_version'))}",
        _ended(episode),
    ]
    fork = episode.get("forked_from")
    if isinstance(fork, Mapping):
        lines.append(f"forked from: {text_line(fork.get('episode_id'))} at turn {text_line(fork.get('turn'), 16)}")
    lines.append(_workspace(episode))
    steps = episode.get("steps")
    steps = steps if isinstance(steps, list) else []
    lines += _images(steps)
    lines.append(f"steps ({len(steps)} found):")
    if len(steps) <= STEPS_SHOWN:
        for step in steps:
            lines += step_lines(step)
    else:
        half = STEPS_SHOWN // 2
        for step in steps[:half]:
            lines += step_lines(step)
        lines.append(f"  ... {len(steps) - STEPS_SHOWN} steps left out (explain --json has them all)")
        for step in steps[-half:]:
            lines += step_lines(step)
    notes = episode.get("notes")
    for note in notes if isinstance(notes, list) else []:
        lines.append(f"note: {text_line(note, 400)}")
    return lines
