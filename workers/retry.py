"""One retry policy for runs that failed for the infrastructure's sake (a sandbox error, a starved host, an
outage): how many attempts, and how long to wait between them.

Why a value: the grader, the language step runner, the worker loop and the judge client all retry the same
way (capped exponential backoff, jittered so that runs failed together do not retry together); each keeps its
own numbers, the arithmetic is here once.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

#: Exponents past this add nothing (every cap is reached long before) and keep ``2 ** n`` small.
_MAX_EXPONENT = 31


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``attempts`` runs at most; after failed attempt ``n`` wait ``min(backoff_max_s, backoff_s * 2**(n-1))``,
    stretched by up to ``jitter`` of itself at random."""

    attempts: int
    backoff_s: float
    backoff_max_s: float
    jitter: float = 0.5

    def numbers(self) -> range:
        """The attempt numbers, from 1 (at least one attempt, whatever ``attempts`` says)."""
        return range(1, max(1, self.attempts) + 1)

    def again(self, attempt: int) -> bool:
        """Whether failed attempt ``attempt`` is followed by another."""
        return attempt < self.attempts

    def delay(self, attempt: int, *, base_s: float | None = None, rand: Callable[[], float] | None = None) -> float:
        """Seconds to wait after failed attempt ``attempt`` (from 1); ``base_s`` replaces ``backoff_s`` (a
        starved host is given longer), ``rand`` the random draw of the jitter."""
        base = self.backoff_s if base_s is None else base_s
        capped = min(self.backoff_max_s, base * 2.0 ** (min(attempt, _MAX_EXPONENT + 1) - 1))
        if not self.jitter:
            return capped
        return capped * (1 + (rand or random.random)() * self.jitter)  # jitter, not crypto


#: A sandbox run that failed for the infrastructure's sake: three attempts, 0.25 s then 0.5 s apart (jittered).
SANDBOX_RETRY = RetryPolicy(attempts=3, backoff_s=0.25, backoff_max_s=4.0)
