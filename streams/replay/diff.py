"""Old vs new reward per generation (pure): what changed, sorted by generation id, with counts.

``changed``: the reward number differs (what a trainer would see). ``reasons_changed``: same number, other
reasons or flags. ``old_missing``: the live stream has no reward for it (reported, not an error).
``new_missing``: the replay produced none in time (the replay failed for it). An image task's entry also has
``verifier``: the old and the new verification's evidence (``streams.replay.evidence``); other entries do not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from schemas.events import HiddenVerdict, RewardEvent
from streams.replay.evidence import verifier_side

Kind = Literal["same", "changed", "reasons_changed", "old_missing", "new_missing"]
KINDS: tuple[Kind, ...] = ("changed", "reasons_changed", "old_missing", "new_missing", "same")
#: Rewards closer than this are equal (they are rounded to 9 places by the policy).
TOLERANCE = 1e-9


@dataclass(frozen=True, slots=True)
class Entry:
    """One replayed generation: its old and new reward (and, for an image task, the verdicts they used)."""

    generation_id: str
    run_id: str
    task_id: str
    old: RewardEvent | None
    new: RewardEvent | None
    kind: Kind
    old_verdict: HiddenVerdict | None = None
    new_verdict: HiddenVerdict | None = None

    def verifier(self) -> dict[str, Any] | None:
        """Both sides' verification evidence of an image task (None for any other generation)."""
        if self.old_verdict is None and self.new_verdict is None:
            return None
        return {"old": verifier_side(self.old_verdict), "new": verifier_side(self.new_verdict)}

    def reasons_removed(self) -> list[str]:
        return _minus(self.old.reasons if self.old else [], self.new.reasons if self.new else [])

    def reasons_added(self) -> list[str]:
        return _minus(self.new.reasons if self.new else [], self.old.reasons if self.old else [])

    def as_json(self) -> dict[str, Any]:
        delta = None if self.old is None or self.new is None else round(self.new.reward - self.old.reward, 9)
        verifier = self.verifier()
        return {
            "generation_id": self.generation_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "kind": self.kind,
            "old": _side(self.old),
            "new": _side(self.new),
            "delta": delta,
            "reasons_removed": self.reasons_removed(),
            "reasons_added": self.reasons_added(),
            **({} if verifier is None else {"verifier": verifier}),
        }


@dataclass(frozen=True, slots=True)
class Report:
    """Every replayed generation, sorted by generation id."""

    entries: tuple[Entry, ...]

    def of(self, kind: Kind) -> list[Entry]:
        return [e for e in self.entries if e.kind == kind]

    def counts(self) -> dict[str, int]:
        return {kind: len(self.of(kind)) for kind in KINDS}

    def as_json(self, *, only_differences: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"replayed": len(self.entries), "counts": self.counts()}
        for kind in KINDS[:-1]:
            out[kind] = [e.as_json() for e in self.of(kind)]
        if not only_differences:
            out["generations"] = [e.as_json() for e in self.entries]
        return out


def classify(old: RewardEvent | None, new: RewardEvent | None) -> Kind:
    """How the new reward compares with the old one."""
    if new is None:
        return "new_missing"
    if old is None:
        return "old_missing"
    if abs(new.reward - old.reward) > TOLERANCE:
        return "changed"
    if list(new.reasons) != list(old.reasons) or sorted(new.flags) != sorted(old.flags):
        return "reasons_changed"
    return "same"


@dataclass(frozen=True, slots=True)
class Replayed:
    """Identity of one replayed generation (what the diff needs of the generation event)."""

    generation_id: str
    run_id: str
    task_id: str


def diff(
    generations: Iterable[Replayed],
    old: Mapping[str, RewardEvent],
    new: Mapping[str, RewardEvent],
    old_verdicts: Mapping[str, HiddenVerdict] | None = None,
    new_verdicts: Mapping[str, HiddenVerdict] | None = None,
) -> Report:
    """Compare old and new reward of each generation (with the image-task verdicts each side used, when
    given); entries sorted by generation id."""
    old_v, new_v = old_verdicts or {}, new_verdicts or {}
    entries = [
        Entry(
            g.generation_id,
            g.run_id,
            g.task_id,
            old.get(g.generation_id),
            new.get(g.generation_id),
            classify(old.get(g.generation_id), new.get(g.generation_id)),
            old_v.get(g.generation_id),
            new_v.get(g.generation_id),
        )
        for g in generations
    ]
    return Report(tuple(sorted(entries, key=lambda e: e.generation_id)))


def _side(reward: RewardEvent | None) -> dict[str, Any] | None:
    if reward is None:
        return None
    return {
        "reward": reward.reward,
        "reasons": list(reward.reasons),
        "flags": list(reward.flags),
        "missing": list(reward.missing),
        "policy": f"{reward.policy_name} v{reward.policy_version}",
        "task_version": reward.task_version,
        "components": dict(sorted(reward.components.items())),
    }


def _minus(left: Iterable[str], right: Iterable[str]) -> list[str]:
    """``left`` without the items of ``right`` (as multisets), in ``left``'s order."""
    rest = list(right)
    out = []
    for item in left:
        if item in rest:
            rest.remove(item)
        else:
            out.append(item)
    return out
