"""An episode's transcript: each action the agent took and how it ended, kept with its state, stored at its end.

Why: the judge scores an episode's submit on what it changed *and* how it got there (did it run the tests
after its fix?), and the verifier's fresh sandbox knows nothing of the steps. Each applied action adds one line
to the episode's state row (turn, action, what it named, status, exit code: never output, never hidden data);
a long episode keeps its last ``MAX_STEPS`` and counts the rest. At the end the transcript is stored as a
content-addressed JSON artifact (``document``) that the episode's generation names (``transcript_ref``), read
by the judge role (``steps_of``) and by a replay of the generation, unchanged.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

import orjson

from schemas.episodes import (
    ActionEvent,
    ExecAction,
    ForkAction,
    ObservationEvent,
    OpenAction,
    WriteAction,
    claim_of,
)
from workers.episodes.turns import EpisodeState, TranscriptLine
from workers.judge.base import TranscriptStep

#: Lines an episode's state keeps (the last ones); what one line's detail is cut to.
MAX_STEPS = 100
DETAIL_MAX_CHARS = 160
#: The most bytes of a transcript document the judge reads (MAX_STEPS lines fit with room to spare).
DOCUMENT_MAX_BYTES = 256 << 10
SCHEMA = "rewardstream.transcript/v1"


def detail(event: ActionEvent) -> str:
    """What an action named, for its line: an exec's command, a write's path and size, a read's path."""
    action = event.action
    if isinstance(action, ExecAction):
        command = action.command if isinstance(action.command, str) else shlex.join(action.command)
        text = command
    elif isinstance(action, WriteAction):
        text = f"{action.path} ({_write_amount(action)})"
    elif isinstance(action, OpenAction):
        text = action.task_id
    elif isinstance(action, ForkAction):
        text = f"{action.from_episode} at turn {action.turn}"
    else:
        text = getattr(action, "path", "")
    text = text.replace("\n", " ")
    return text if len(text) <= DETAIL_MAX_CHARS else text[: DETAIL_MAX_CHARS - 3] + "..."


def _write_amount(action: WriteAction) -> str:
    claim = claim_of(action)
    if claim is not None:
        return f"{claim.size} bytes by claim check"
    if action.text is not None:
        return f"{len(action.text.encode('utf-8', 'replace'))} bytes"
    return f"{len(action.base64 or '')} base64 chars"


def noted(state: EpisodeState, event: ActionEvent | None, observation: ObservationEvent) -> EpisodeState:
    """``state`` with one more line: ``event`` answered by ``observation`` (no event: the worker ended the
    episode on its own). The oldest lines go beyond ``MAX_STEPS``."""
    line: TranscriptLine = (
        observation.turn,
        observation.action or "end",
        detail(event) if event is not None else (observation.reason or ""),
        str(observation.status),
        observation.exit_code,
    )
    lines = (*state.transcript, line)
    dropped = max(0, len(lines) - MAX_STEPS)
    return replace(state, transcript=lines[dropped:], transcript_omitted=state.transcript_omitted + dropped)


def document(state: EpisodeState) -> bytes:
    """The transcript as the JSON artifact stored at the episode's end."""
    steps = [{"turn": t, "action": a, "detail": d, "status": s, "exit_code": c} for t, a, d, s, c in state.transcript]
    return orjson.dumps({"schema": SCHEMA, "episode_id": state.episode_id, "task_id": state.task_id,
                         "omitted": state.transcript_omitted, "steps": steps})  # fmt: skip


def steps_of(data: bytes) -> tuple[tuple[TranscriptStep, ...], int]:
    """(the steps, how many earlier ones were not kept) of a stored transcript; ValueError if it is none."""
    if len(data) > DOCUMENT_MAX_BYTES:
        raise ValueError(f"a transcript of {len(data)} bytes is over the {DOCUMENT_MAX_BYTES}-byte cap")
    try:
        doc: Any = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("steps"), list):
        raise ValueError(f"not a {SCHEMA} document")
    omitted = doc.get("omitted", 0)
    steps = tuple(_step(item) for item in doc["steps"][:MAX_STEPS])
    return steps, omitted if type(omitted) is int and omitted >= 0 else 0


def _step(item: Any) -> TranscriptStep:
    if not isinstance(item, dict):
        raise ValueError("a step is not an object")
    turn, code = item.get("turn"), item.get("exit_code")
    texts = [item.get(k) for k in ("action", "detail", "status")]
    bad_code = code is not None and type(code) is not int
    if type(turn) is not int or bad_code or not all(isinstance(t, str) for t in texts):
        raise ValueError("a step is malformed")
    action, what, status = (str(t)[:DETAIL_MAX_CHARS] for t in texts)
    return TranscriptStep(turn, action, what, status, code)
