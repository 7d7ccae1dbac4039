"""The e2e's verdict from what it read back: every reward right and exactly once, and the one JSON line.

Pure: the rewards topic's records (generation id, reward) in, a tally out, so the rule is unit-tested.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Tally:
    """What the rewards topic held for the expected generations."""

    rewards: int
    duplicates: int
    missing: tuple[str, ...]
    wrong: tuple[str, ...]
    unexpected: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.missing or self.wrong or self.unexpected)

    def problems(self, shown: int = 10) -> list[str]:
        lines = [f"missing reward: {g}" for g in self.missing[:shown]]
        lines += [f"wrong reward: {w}" for w in self.wrong[:shown]]
        lines += [f"reward for an unknown generation: {g}" for g in self.unexpected[:shown]]
        if self.duplicates:
            lines.append(f"{self.duplicates} duplicate rewards")
        return lines


def tally(records: Iterable[tuple[str, float]], expected: Mapping[str, float]) -> Tally:
    """``records``: (generation_id, reward) of every reward on the topic; ``expected``: generation_id -> reward.
    A duplicate is any record beyond the first for one generation (even with the same value)."""
    seen: Counter[str] = Counter()
    values: dict[str, float] = {}
    for generation_id, reward in records:
        seen[generation_id] += 1
        values.setdefault(generation_id, reward)
    wrong = tuple(
        f"{g}: {values[g]:g}, expected {want:g}"
        for g, want in sorted(expected.items())
        if g in values and values[g] != want
    )
    return Tally(
        rewards=sum(seen.values()),
        duplicates=sum(n - 1 for n in seen.values()),
        missing=tuple(sorted(set(expected) - set(seen))),
        wrong=wrong,
        unexpected=tuple(sorted(set(seen) - set(expected))),
    )


@dataclass(slots=True)
class Outcome:
    """Everything the e2e checks; ``passed`` iff all hold."""

    tally: Tally | None = None
    max_replicas: int = 0
    scaled_down: bool = False
    pod_killed: str | None = None
    stopped: bool = False
    host_restored: bool = False
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return (
            self.tally is not None
            and self.tally.ok
            and self.max_replicas > 1
            and self.scaled_down
            and self.pod_killed is not None
            and self.stopped
            and self.host_restored
            and not self.errors
        )

    def line(self) -> dict[str, object]:
        """The contract's last line (issue 27)."""
        return {
            "rewards_ok": self.tally is not None and self.tally.ok,
            "rewards": self.tally.rewards if self.tally else 0,
            "duplicates": self.tally.duplicates if self.tally else 0,
            "max_replicas": self.max_replicas,
            "scaled_down": self.scaled_down,
            "seconds": round(self.seconds, 1),
        }

    def failures(self) -> list[str]:
        """Why it did not pass, one line each."""
        out = list(self.errors)
        if self.tally is None:
            out.append("the rewards topic was not read")
        else:
            out += self.tally.problems()
        if self.max_replicas <= 1:
            out.append(f"KEDA never scaled the executor above 1 (max ready replicas {self.max_replicas})")
        if not self.scaled_down:
            out.append("the executor did not scale back down once drained")
        if self.pod_killed is None:
            out.append("no executor pod was killed with work in flight")
        if not self.stopped:
            out.append("not every process it started was stopped")
        if not self.host_restored:
            out.append("the host was not left as it was")
        return out
