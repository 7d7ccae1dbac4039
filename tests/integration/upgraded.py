"""The "new" code of a rolling-upgrade test: the events the roles exchange, one minor version later.

Why a wrapper, not a branch: a rolling upgrade runs two versions of the code at once on the same topics. The
new version here is the real code with one compatible change, a minor bump that adds one optional field,
``trace_id`` (a trainer's trace, copied from the generation onto its results and its reward):

* ``GenerationEvent``, ``ExecutionResult``, ``HiddenVerdict``, ``JudgeScore`` 1.0 -> 1.1, ``RewardEvent`` 1.1 -> 1.2;
* a worker's results copy ``trace_id`` from the generation they are about (``schemas.ids.result_ids``);
* the reward processor's reward copies it from the parts it joined (``streams.reward.join.reward_event``, into a
  ``DecidedReward`` that writes the new field).

``python -m tests.integration.upgraded <rewardstream arguments>`` installs this before any other module of the
code imports the events, then runs the ``rewardstream`` CLI: the same worker or reward processor, upgraded. The
test process itself only uses ``NEW`` (to encode a new trainer's generations, or to decode as a new reader).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from typing import Any, ClassVar, cast

from pydantic import Field

from schemas import events
from schemas.codec import Contract, SchemaVersion1

TRACE_DESCRIPTION = "the trainer's trace id, copied onto every result and the reward (added in the minor bump)"


class GenerationEvent(events.GenerationEvent):
    version: ClassVar[tuple[int, int]] = (1, 1)
    schema_version: SchemaVersion1 = Field("1.1", description="major.minor of this contract")
    trace_id: events.Id | None = Field(None, exclude_if=events.is_none, description=TRACE_DESCRIPTION)


class ExecutionResult(events.ExecutionResult):
    version: ClassVar[tuple[int, int]] = (1, 1)
    schema_version: SchemaVersion1 = Field("1.1", description="major.minor of this contract")
    trace_id: events.Id | None = Field(None, exclude_if=events.is_none, description=TRACE_DESCRIPTION)


class HiddenVerdict(events.HiddenVerdict):
    version: ClassVar[tuple[int, int]] = (1, 1)
    schema_version: SchemaVersion1 = Field("1.1", description="major.minor of this contract")
    trace_id: events.Id | None = Field(None, exclude_if=events.is_none, description=TRACE_DESCRIPTION)


class JudgeScore(events.JudgeScore):
    version: ClassVar[tuple[int, int]] = (1, 1)
    schema_version: SchemaVersion1 = Field("1.1", description="major.minor of this contract")
    trace_id: events.Id | None = Field(None, exclude_if=events.is_none, description=TRACE_DESCRIPTION)


class RewardEvent(events.RewardEvent):
    version: ClassVar[tuple[int, int]] = (1, 2)
    schema_version: SchemaVersion1 = Field("1.2", description="major.minor of this contract")
    trace_id: events.Id | None = Field(None, exclude_if=events.is_none, description=TRACE_DESCRIPTION)


#: The new contracts by name (their ``__name__`` is the old one's: errors and the DLQ name the same model).
NEW: dict[str, type[Contract]] = {
    cls.__name__: cls for cls in (GenerationEvent, ExecutionResult, HiddenVerdict, JudgeScore, RewardEvent)
}
#: What a version of each contract writes: (old, new).
VERSIONS = {name: (cls.__mro__[1].version_string(), cls.version_string()) for name, cls in NEW.items()}  # type: ignore[attr-defined]


def install() -> None:
    """Make this process the new version: the new contracts in ``schemas.events``, results and rewards that
    copy ``trace_id``. Must run before anything imports a role, the processor or the SDK (they bind the names)."""
    bound = [m for m in ("workers.roles.service", "streams.reward.join", "rewardstream.cli.main") if m in sys.modules]
    assert not bound, f"too late to upgrade: {bound} already imported the old contracts"
    for name, cls in NEW.items():
        setattr(events, name, cls)

    import schemas.ids

    old_result_ids = schemas.ids.result_ids

    def result_ids(about: schemas.ids.AboutGeneration) -> schemas.ids.ResultIds:
        ids = old_result_ids(about)
        trace = getattr(about, "trace_id", None) if isinstance(about, GenerationEvent) else None
        if trace is not None:  # a result of a generation carries its trace (a join state never does)
            cast("dict[str, Any]", ids)["trace_id"] = trace
        return ids

    schemas.ids.result_ids = result_ids

    from streams.reward import join
    from streams.reward.decided import DecidedReward

    @dataclass(slots=True, kw_only=True)
    class TracedReward(DecidedReward):
        trace_id: str | None = None

        def fields(self) -> dict[str, Any]:
            return {**DecidedReward.fields(self), "trace_id": self.trace_id}  # the new model's last field

    old_reward_event = join.reward_event

    def reward_event(state: join.JoinState, *args: Any, **kwargs: Any) -> DecidedReward:
        reward = old_reward_event(state, *args, **kwargs)
        parts = (state.execution, state.verdict, state.judgement)
        trace = next((t for p in parts if p is not None and (t := getattr(p, "trace_id", None))), None)
        if trace is None:
            return reward
        return TracedReward(**{f.name: getattr(reward, f.name) for f in fields(DecidedReward)}, trace_id=trace)

    join.reward_event = reward_event


if __name__ == "__main__":
    install()
    from rewardstream.cli.main import main

    sys.argv = ["rewardstream", *sys.argv[1:]]
    main()
