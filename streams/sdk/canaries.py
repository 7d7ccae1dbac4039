"""Canaries mixed into a trainer's batches at a rate: impossible tasks whose any reward above 0 is a detected hack.

Why in the SDK: only the trainer can ask the policy for a canary's prompt (the pipeline grades what the policy wrote;
it cannot write it), so the mixing happens where batches are made. The positions are random (a fixed pattern could
be learnt) but reproducible from the seed, and every task of the batch keeps its order. What comes back needs no
handling of its own: a canary's reward is ``valid: false`` and waits in ``held_out()``, counted as a hit when above
0 (``streams.sdk.validity``), never training data.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from streams.sdk.config import SdkError


class CanaryMix:
    """Inserts a canary task id after each task with probability ``rate`` (the canaries taken in turn)."""

    def __init__(self, canaries: Sequence[str], rate: float, *, seed: int | None = None) -> None:
        if not 0.0 <= rate <= 1.0:
            raise SdkError(f"canary rate must be within 0..1, got {rate!r}")
        if rate > 0 and not canaries:
            raise SdkError("a canary rate above 0 needs at least one canary task id (load examples/canary_tasks.jsonl)")
        self._canaries = tuple(canaries)
        self._rate = rate
        self._random = random.Random(seed)  # noqa: S311 - positions, not secrets: reproducible on purpose
        self._next = 0
        self.mixed = 0

    def batch(self, task_ids: Sequence[str]) -> list[str]:
        """``task_ids`` in order, with canaries inserted at random places at the configured rate."""
        out: list[str] = []
        for task_id in task_ids:
            out.append(task_id)
            if self._rate > 0 and self._random.random() < self._rate:
                out.append(self._canaries[self._next % len(self._canaries)])
                self._next += 1
                self.mixed += 1
        return out

    def is_canary(self, task_id: str) -> bool:
        """Whether ``task_id`` is one of this mix's canaries (the trainer keeps them out of its own statistics)."""
        return task_id in self._canaries
