"""The human-readable verifier part of ``rewardstream explain`` and ``replay`` for an image task (pure): what its
``test.sh`` decided and the evidence, i.e. the task image the verification ran on, the reward file as written
and the end of test.sh's output.

Why bounded and total: the output tail is up to a few thousand characters of the hidden tests' own output, so
only its last ``OUTPUT_LINES`` lines are printed (``--json`` has the whole tail the verdict kept); whatever a
record holds, the formatter prints something and never raises (explain is what one runs when records are odd).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rewardstream.cli.explain_episode import LINE_CHARS, text_line

#: Lines of test.sh's output tail printed (its last ones: a test run's summary and failures come last).
OUTPUT_LINES = 12


def _reward(verifier: Mapping[str, Any]) -> str:
    reward, source = verifier.get("reward"), verifier.get("source")
    shown = f"{text_line(reward, 24)} from {text_line(source, 64)}" if source else f"{text_line(reward, 24)}"
    if verifier.get("timed_out") is True:
        shown += " (test.sh ran past its timeout)"
    return shown


def output_tail_lines(tail: object) -> str:
    """The last ``OUTPUT_LINES`` lines of ``tail``, each one printable line, saying how many came before."""
    if not isinstance(tail, str):
        return "(not recorded)"
    if not tail.strip():
        return "(test.sh printed nothing)"
    lines = tail.rstrip("\n").splitlines()
    shown = [text_line(line, LINE_CHARS) for line in lines[-OUTPUT_LINES:]]
    before = len(lines) - len(shown)
    return "\n".join(([f"... ({before} earlier lines kept, see --json)"] if before > 0 else []) + shown)


def verifier_rows(verifier: object) -> dict[str, object]:
    """An image task's verdict's ``verifier`` section as rows (none when there is no such section: a test
    suite's verdict prints as before)."""
    if not isinstance(verifier, Mapping):
        return {}
    rows: dict[str, object] = {"verifier reward": _reward(verifier)}
    if verifier.get("reason"):
        rows["verifier reason"] = text_line(verifier.get("reason"), 400)
    rows["task image"] = text_line(verifier.get("image_id"), 80) if verifier.get("image_id") else "(not recorded)"
    written, source = verifier.get("reward_file"), verifier.get("source")
    if isinstance(written, str):
        rows["reward file"] = f"{text_line(source, 64)}: {text_line(repr(written), 400)}"
    else:
        rows["reward file"] = "(not recorded)" if source else "(none written)"
    rows["test.sh output (tail)"] = output_tail_lines(verifier.get("output_tail"))
    return rows
