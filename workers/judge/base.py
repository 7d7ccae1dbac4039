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
class JudgeRequest:
    """What a judge sees: the task's public prompt and the candidate code (never hidden tests)."""

    task_id: str
    prompt: str
    entry_point: str | None
    code: str

    @property
    def code_sha256(self) -> str:
        """Digest of the code: the cache key (with the task and the judge's identity)."""
        return hashlib.sha256(self.code.encode("utf-8", errors="surrogatepass")).hexdigest()


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
