"""Judge results cached by code hash: GRPO groups and retries send the same code many times, and a model
call costs far more than a dictionary lookup. Only scores are cached; errors are retried next time."""

from __future__ import annotations

import threading
from collections import OrderedDict

from schemas.settings import JudgeSettings, defaults
from workers.judge.base import Judge, JudgeOutcome, JudgeRequest


class CachedJudge:
    """An LRU cache in front of a ``Judge``, keyed by (model, prompt version, task, sha256 of what is judged: the
    code, and an episode's transcript)."""

    def __init__(self, inner: Judge, max_entries: int = defaults(JudgeSettings).cache_size) -> None:
        self.inner = inner
        self.model = inner.model
        self.prompt_version = inner.prompt_version
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str, str, str], JudgeOutcome] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _key(self, request: JudgeRequest) -> tuple[str, str, str, str]:
        return (self.model, self.prompt_version, request.task_id, request.digest)

    def score(self, request: JudgeRequest) -> JudgeOutcome:
        """A cached score if there is one, else the inner judge's (cached when it is a score)."""
        key = self._key(request)
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return found.from_cache()
            self.misses += 1
        outcome = self.inner.score(request)
        if outcome.ok and self.max_entries > 0:
            with self._lock:
                self._entries[key] = outcome
                self._entries.move_to_end(key)
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
        return outcome

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def close(self) -> None:
        """Close the inner judge."""
        self.inner.close()
