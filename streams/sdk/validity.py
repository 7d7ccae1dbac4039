"""Which rewards are training data: the SDK's default stream hands out only those, and holds the rest apart.

Why in the SDK: a reward that is not valid for training (a canary's, whatever it scored; one the infrastructure
decided: a sandbox_error no retry replaced, a required signal that missed the deadline) must never reach a
trainer's batch by accident. ``TrainerClient.rewards()`` yields training data only; invalid rewards not claimed
by a future wait in ``held_out()``, counted (a canary above 0 is a detected hack). A future always resolves with
its generation's reward, invalid or not: the trainer asked for that one, and it is marked (``valid`` false,
``invalid_reason``, ``canary``). A 1.0 reward, written before the claim, claims nothing and is handed out as
rewards always were.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from schemas.events import RewardEvent

#: Invalid rewards kept for ``held_out()`` before the oldest are dropped (counted): a trainer that never reads
#: them must not grow without bound.
MAX_HELD_OUT = 10_000


def training_data(reward: RewardEvent) -> bool:
    """Whether a reward may be trained on: valid, or a 1.0 reward that claims nothing either way."""
    return reward.valid is not False


@dataclass
class HeldOut:
    """Invalid rewards no future claimed, oldest first, and the counts of every invalid reward seen."""

    rewards: OrderedDict[str, RewardEvent] = field(default_factory=OrderedDict)
    invalid: int = 0
    canary_hits: int = 0
    dropped: int = 0

    def count(self, reward: RewardEvent) -> None:
        """Count a reward as it arrives (claimed by a future or not)."""
        if not training_data(reward):
            self.invalid += 1
            if reward.canary and reward.reward > 0:
                self.canary_hits += 1

    def add(self, reward: RewardEvent) -> None:
        """Keep an unclaimed invalid reward for ``take`` (the oldest is dropped past ``MAX_HELD_OUT``)."""
        self.rewards[reward.generation_id] = reward
        while len(self.rewards) > MAX_HELD_OUT:
            self.rewards.popitem(last=False)
            self.dropped += 1

    def take(self) -> list[RewardEvent]:
        """Every kept reward, oldest first; they are handed out once."""
        taken = list(self.rewards.values())
        self.rewards.clear()
        return taken
