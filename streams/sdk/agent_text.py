"""The text face of an episode for a language model: its reply -> one action, an observation -> text.

Why a separate, pure module: the gym env and the verl tool both need it, and whatever a model writes must
become either an action of the contract or a ``BadAction`` whose text tells the model what to fix; never an
exception. The model answers with the contract's JSON object, bare or in a fenced block (```json ... ```);
only the agent's actions (exec, write, read, submit) are accepted, open and fork stay the trainer's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import orjson
import pydantic
from pydantic import Field, TypeAdapter

from schemas.codec import one_line, problems_of
from schemas.episodes import ExecAction, ObservationEvent, ReadAction, SubmitAction, WriteAction

AgentAction = ExecAction | WriteAction | ReadAction | SubmitAction
_AGENT_ACTION: TypeAdapter[AgentAction] = TypeAdapter(
    Annotated[ExecAction | WriteAction | ReadAction | SubmitAction, Field(discriminator="action")]
)
_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\r?\n(.*?)```", re.DOTALL)
_PROBLEM_MAX_CHARS = 600

#: What to tell the model about the action format (put it in the prompt).
ACTION_HELP = (
    "Reply with exactly one JSON action object (bare, or in a ```json fenced block):\n"
    '{"action": "read", "path": "calc/ops.py"}\n'
    '{"action": "exec", "command": "python -m pytest -q", "timeout_s": 10}   (a string runs under /bin/sh -c, '
    "a list is argv)\n"
    '{"action": "write", "path": "calc/ops.py", "text": "..."}   (or "base64" instead of "text")\n'
    '{"action": "submit"}   (ends the episode; the reward comes from hidden tests)'
)


@dataclass(frozen=True)
class BadAction:
    """A reply that is not an action: ``problem`` says why, in words for the model."""

    problem: str

    def text(self) -> str:
        """The observation the model gets instead of a step (nothing was sent, no turn was used)."""
        return f"invalid action: {self.problem}\n\n{ACTION_HELP}"


def parse_action(reply: str | Mapping[str, Any]) -> AgentAction | BadAction:
    """The one action in a model reply (text, or an already-parsed object such as a tool call's arguments)."""
    if isinstance(reply, Mapping):
        return _validated(reply)
    if not isinstance(reply, str):
        return BadAction(f"expected text or a JSON object, got {type(reply).__name__}")
    found = _json_object(reply)
    return found if isinstance(found, BadAction) else _validated(found)


def _json_object(reply: str) -> dict[str, Any] | BadAction:
    """The first candidate that is a JSON object: the whole reply, a fenced block, the outermost braces."""
    stripped = reply.strip()
    candidates = [stripped, *(m.group(1).strip() for m in _FENCE.finditer(reply))]
    first, last = stripped.find("{"), stripped.rfind("}")
    if 0 <= first < last:
        candidates.append(stripped[first : last + 1])
    problem = "no JSON object found"
    for candidate in candidates:
        if not candidate.startswith("{"):
            continue
        try:
            value = orjson.loads(candidate)
        except orjson.JSONDecodeError as exc:  # also: nesting deeper than orjson's limit, lone surrogates
            problem = f"not valid JSON ({_short(str(exc))})"
            continue
        if isinstance(value, dict):
            return value
    return BadAction(problem)


def _validated(obj: Mapping[str, Any]) -> AgentAction | BadAction:
    try:
        return _AGENT_ACTION.validate_python(dict(obj))
    except pydantic.ValidationError as exc:
        return BadAction(_short(one_line(problems_of(exc), "action")))
    except (RecursionError, ValueError, TypeError) as exc:  # a pathological object (e.g. a self-referencing one)
        return BadAction(f"not an action object ({type(exc).__name__})")


def _short(text: str) -> str:
    return text if len(text) <= _PROBLEM_MAX_CHARS else text[:_PROBLEM_MAX_CHARS] + "..."


def render_observation(obs: ObservationEvent) -> str:
    """An observation as the model reads it: what happened, then the output or the file."""
    head = f"turn {obs.turn} {obs.action or 'end'}: {obs.status}"
    if obs.exit_code is not None:
        head += f" (exit code {obs.exit_code})"
    parts = [head]
    if obs.reason:
        parts.append(f"reason: {obs.reason}")
    if obs.content is not None:
        parts.append(obs.content + ("\n[... file truncated]" if obs.content_truncated else ""))
    for name, text, cut in (("stdout", obs.stdout, obs.stdout_truncated), ("stderr", obs.stderr, obs.stderr_truncated)):
        if text:
            parts.append(f"{name}{' (its end)' if cut else ''}:\n{text}")
    if obs.ended:
        parts.append(f"episode ended: {obs.ended}")
    return "\n".join(parts)
