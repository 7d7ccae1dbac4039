"""A reward the processor decided, as plain data: written to the wire without building a pydantic model.

Why: validating a ``RewardEvent`` (every field, a nested model per input) and serialising it cost a tenth of the
processor's CPU a reward, for values this code makes from parts already validated and a policy validated when it
loaded. The bytes are the model's own, key for key (``fields`` follows ``RewardEvent.model_fields``): a property
test checks them against the model's encoding on generated rewards. Whatever orjson refuses goes through the
model instead, so an odd value fails (or passes) exactly as it did there; ``event`` gives the model to callers
that want one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import orjson

from schemas.codec import EncodeError, encode
from schemas.events import RewardEvent
from schemas.result_rules import InvalidReason, check_validity
from schemas.signals import Signal

#: The version every decided reward is written as.
SCHEMA_VERSION = RewardEvent.version_string()
#: ``RewardEvent``'s fields left out when unset (``exclude_if=is_none``).
_LEFT_OUT_WHEN_NONE = frozenset(name for name, info in RewardEvent.model_fields.items() if info.exclude_if is not None)
_OPTIONS = orjson.OPT_UTC_Z


class DecidedInput(NamedTuple):
    """One event a reward was computed from (``InputRef``'s fields)."""

    role: Signal
    event_id: str


@dataclass(slots=True, kw_only=True)
class DecidedReward:
    """One generation's reward as the processor decided it: ``RewardEvent``'s fields, claimed (``valid`` set).
    Never changed once made (not frozen: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, twice the cost, once a reward)."""

    event_id: str
    created_at: datetime
    generation_id: str
    episode_id: str
    run_id: str
    task_id: str
    task_version: str | None
    turn: int
    reward: float
    policy_name: str
    policy_version: str
    components: dict[str, float]
    reasons: list[str]
    flags: list[str]
    missing: list[Signal]
    inputs: list[DecidedInput]
    valid: bool
    canary: bool
    invalid_reason: InvalidReason | None

    def __post_init__(self) -> None:
        check_validity(RewardEvent.version, self.valid, self.canary, self.invalid_reason)

    def key(self) -> bytes:
        """The Kafka key (``Event.key``): the episode id."""
        return self.episode_id.encode()

    def fields(self) -> dict[str, Any]:
        """The ``RewardEvent`` fields, in its wire order (its ``model_fields``), as its encoding writes them."""
        data: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION, "event_id": self.event_id, "created_at": self.created_at,
            "generation_id": self.generation_id, "episode_id": self.episode_id, "run_id": self.run_id,
            "task_id": self.task_id, "task_version": self.task_version, "turn": self.turn,
            "reward": float(self.reward), "policy_name": self.policy_name, "policy_version": self.policy_version,
            "components": {name: float(value) for name, value in self.components.items()},
            "reasons": self.reasons, "flags": self.flags, "missing": self.missing,
            "inputs": [{"role": role, "event_id": event_id} for role, event_id in self.inputs],
            "valid": self.valid, "canary": self.canary, "invalid_reason": self.invalid_reason,
        }  # fmt: skip
        for name in _LEFT_OUT_WHEN_NONE:
            if name in data and data[name] is None:
                del data[name]
        return data

    def encode(self) -> bytes:
        """The wire bytes, ``encode(self.event())``'s; EncodeError over the reward's size cap."""
        fields = self.fields()
        try:
            data = orjson.dumps(fields, option=_OPTIONS)
        except orjson.JSONEncodeError:
            return encode(RewardEvent.model_validate(fields))
        if len(data) > RewardEvent.max_bytes:
            raise EncodeError(f"RewardEvent is {len(data)} bytes, over the {RewardEvent.max_bytes}-byte cap")
        return data

    def event(self) -> RewardEvent:
        """The reward as the contract's model (validated)."""
        return RewardEvent.model_validate(self.fields())
