"""The ``Judge`` interface: what the judge worker needs from any scorer, and the outcome it gets back.

Why outcomes and not exceptions: a judge server that is down or answers nonsense is a normal event the
reward policy must see (``JudgeScore.status == "error"`` with a reason), not a crash of the worker.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Protocol

from schemas.errors import RewardstreamError


class JudgeError(RewardstreamError):
    """A judge could not be configured or reached (configuration problems; run failures are outcomes)."""


@dataclass(frozen=True, slots=True)
class TranscriptStep:
    """One action of an agent episode as a judge sees it: what the agent did and how it ended (never output,
    never hidden data). ``detail``: the command, or the path (and bytes) of a write or read."""

    turn: int
    action: str
    detail: str
    status: str
    exit_code: int | None = None

    def line(self) -> str:
        """One line of text: ``turn 3 exec python -m pytest -q: nonzero_exit (exit 1)``."""
        head = f"turn {self.turn} {self.action}" + (f" {self.detail}" if self.detail else "")
        code = f" (exit {self.exit_code})" if self.exit_code is not None else ""
        return f"{head}: {self.status}{code}"


@dataclass(frozen=True, slots=True)
class JudgeRequest:
    """What a judge sees: the task's public prompt and the candidate code (never hidden tests); for an agent
    episode, what it changed (``code``) and its transcript, the actions it took and how each ended."""

    task_id: str
    prompt: str
    entry_point: str | None
    code: str
    transcript: tuple[TranscriptStep, ...] | None = None
    #: Steps of the episode before ``transcript`` that were not kept (a long episode keeps its last ones).
    transcript_omitted: int = 0

    @property
    def code_sha256(self) -> str:
        """Digest of the code."""
        return hashlib.sha256(self.code.encode("utf-8", errors="surrogatepass")).hexdigest()

    @property
    def digest(self) -> str:
        """Digest of everything judged (the code, and the transcript if any): the cache key (with the task and
        the judge's identity). A one-shot request's is its code's."""
        if self.transcript is None:
            return self.code_sha256
        text = self.transcript_text()
        return hashlib.sha256(f"{self.code}\0{text}".encode("utf-8", errors="surrogatepass")).hexdigest()

    def transcript_text(self) -> str:
        """The transcript as lines of text ('' without one)."""
        if self.transcript is None:
            return ""
        lines = [f"({self.transcript_omitted} earlier steps not shown)"] if self.transcript_omitted else []
        return "\n".join([*lines, *(step.line() for step in self.transcript)])


@dataclass(frozen=True, slots=True)
class JudgeOutcome:
    """A score in [0, 1] with a rationale, or an error saying why there is none."""

    score: float | None
    rationale: str | None
    error: str | None
    model: str
    prompt_version: str
    latency_ms: float
    cached: bool = False

    @property
    def ok(self) -> bool:
        """Whether there is a score."""
        return self.score is not None

    def from_cache(self) -> JudgeOutcome:
        """The same outcome, marked as served from the cache (no time spent)."""
        return replace(self, cached=True, latency_ms=0.0)


class Judge(Protocol):
    """Scores code. ``score`` must be thread-safe and must not raise for a bad answer or an outage."""

    model: str
    prompt_version: str

    def score(self, request: JudgeRequest) -> JudgeOutcome:
        """Judge ``request``; failures are ``JudgeOutcome(score=None, error=...)``."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...
