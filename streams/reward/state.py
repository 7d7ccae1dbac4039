"""One generation's join state as plain data: what the reward processor's table holds, and its stored form.

Why not a pydantic model: the state is built, copied and marked on every input message (a new state per part,
a copy per later part, a slim marker per reward), always from parts already validated, so validating or
copying it through pydantic was a sixth of the processor's CPU and checked nothing new. It is validated where
its bytes come from outside the process: ``loads`` (a restore from the changelog) goes through ``_Stored``.

The stored form is the JSON pydantic wrote for the model this replaced, key for key, so changelogs written
before and after read alike. A part that was decoded from input bytes as they are (``raw``) is stored as
those bytes instead of being serialised again: it decodes to the same part.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
import pydantic
import pydantic_core
from pydantic import BaseModel, ConfigDict

from schemas.codec import DecodeError, decode
from schemas.events import ExecutionResult, HiddenVerdict, JudgeScore
from schemas.signals import Signal
from streams.reward.policy import Policy, Signals, awaited

PartEvent = ExecutionResult | HiddenVerdict | JudgeScore
Status = Literal["pending", "emitted", "gave_up"]
#: Serialized states begin with this when pending (``status`` is the first key): the deadline scan skips
#: every other state without decoding it.
PENDING_PREFIX = b'{"status":"pending"'


@dataclass(slots=True, kw_only=True)
class JoinState:
    """Everything known about one generation; the table value, keyed by ``generation_id``. Never changed in
    place (the table and the pending index share states, and a savepoint's rollback restores the old one):
    ``replace`` makes the changed copy."""

    status: Status = "pending"  # must stay the first key of the stored form (PENDING_PREFIX)
    generation_id: str
    episode_id: str
    run_id: str
    task_id: str
    turn: int = 0
    partition: int
    first_seen: float  # Kafka timestamp (s) of the first part: deadlines count from here, in event time
    execution: ExecutionResult | None = None
    verdict: HiddenVerdict | None = None
    judgement: JudgeScore | None = None
    withheld_reported: bool = False
    reward_event_id: str | None = None
    reward_offset: int | None = None
    #: Part -> the input bytes it was decoded from as they are (not stored as a field: ``dumps`` writes them
    #: as the part). Not compared: the same state with or without them.
    raw: dict[Signal, bytes] | None = field(default=None, compare=False, repr=False)

    def signals(self) -> Signals:
        """The parts as the policy sees them."""
        return Signals(self.execution, self.verdict, self.judgement)

    def missing(self, policy: Policy) -> tuple[Signal, ...]:
        """Awaited parts that have not arrived (none when every part did: whatever is awaited is among them)."""
        execution, verdict, judgement = self.execution, self.verdict, self.judgement
        if execution is not None and verdict is not None and judgement is not None:
            return ()
        return tuple(p for p in awaited(policy, Signals(execution, verdict, judgement)) if getattr(self, p) is None)

    def replace(self, **changes: object) -> JoinState:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def with_part(self, part: Signal, event: PartEvent, raw: bytes | None) -> JoinState:
        """A copy holding ``event`` as ``part`` (``raw``: its input bytes, if kept; the old part's are dropped).
        Spelled out: ``dataclasses.replace`` cost twice as much, on every part after a generation's first."""
        raws = dict(self.raw) if self.raw else {}
        if raw is not None:
            raws[part] = raw
        else:
            raws.pop(part, None)
        return JoinState(
            status=self.status, generation_id=self.generation_id, episode_id=self.episode_id, run_id=self.run_id,
            task_id=self.task_id, turn=self.turn, partition=self.partition, first_seen=self.first_seen,
            execution=event if part == "execution" else self.execution,  # type: ignore[arg-type]
            verdict=event if part == "verdict" else self.verdict,  # type: ignore[arg-type]
            judgement=event if part == "judgement" else self.judgement,  # type: ignore[arg-type]
            withheld_reported=self.withheld_reported, reward_event_id=self.reward_event_id,
            reward_offset=self.reward_offset, raw=raws or None,
        )  # fmt: skip

    def dumps(self) -> bytes:
        """The stored form. Nulls are kept: events have required-but-nullable fields (e.g. the ``suite_kind`` of
        a task without public tests) that must survive the round trip. Joined, not one ``orjson.dumps`` with
        the parts as ``orjson.Fragment``: orjson's bytes keep its whole buffer (4 KB and up), and a decided
        generation's row stays in the table for the retention (a test bounds it)."""
        head = orjson.dumps({
            "status": self.status, "generation_id": self.generation_id, "episode_id": self.episode_id,
            "run_id": self.run_id, "task_id": self.task_id, "turn": self.turn, "partition": self.partition,
            "first_seen": self.first_seen,
        })  # fmt: skip
        tail = orjson.dumps({
            "withheld_reported": self.withheld_reported, "reward_event_id": self.reward_event_id,
            "reward_offset": self.reward_offset,
        })  # fmt: skip
        raw = self.raw or {}
        return b"".join((
            head[:-1], b',"execution":', _part_bytes(self.execution, raw.get("execution")),
            b',"verdict":', _part_bytes(self.verdict, raw.get("verdict")),
            b',"judgement":', _part_bytes(self.judgement, raw.get("judgement")), b",", tail[1:],
        ))  # fmt: skip

    @classmethod
    def loads(cls, data: bytes) -> JoinState:
        """Inverse of ``dumps`` (ValueError if ``data`` is no join state); a part of a newer minor version (a newer
        processor stored it, before a rollback or a rebalance in the middle of a rolling upgrade) loads as the
        topic's reader would: its new fields dropped."""
        try:
            stored = _Stored.model_validate_json(data)
        except pydantic.ValidationError as exc:
            stored = _loads_newer_parts(data, exc)
        return cls(**{name: getattr(stored, name) for name in _Stored.model_fields})


def _part_bytes(part: PartEvent | None, raw: bytes | None) -> bytes:
    if part is None:
        return b"null"
    return raw if raw is not None else part.__pydantic_serializer__.to_json(part)


def _stored_model() -> type[BaseModel]:
    """The stored form's schema, made from ``JoinState``'s own fields (all but ``raw``): what ``loads``
    validates a row against, so that the two cannot drift apart."""
    hints = typing.get_type_hints(JoinState)
    fields: dict[str, Any] = {
        f.name: (hints[f.name], ... if f.default is dataclasses.MISSING else f.default)
        for f in dataclasses.fields(JoinState)
        if f.name != "raw"
    }
    return pydantic.create_model("StoredJoinState", __config__=ConfigDict(extra="forbid"), **fields)


_Stored = _stored_model()


#: The model of each part a state holds (what ``loads`` decodes a newer minor's part as).
_PART_MODELS: dict[str, type[PartEvent]] = {
    "execution": ExecutionResult,
    "verdict": HiddenVerdict,
    "judgement": JudgeScore,
}


def _loads_newer_parts(data: bytes, exc: pydantic.ValidationError) -> BaseModel:
    """Each part decoded by the codec's rule (forgiving only a newer minor's fields); else ``exc`` again."""
    try:
        row = pydantic_core.from_json(data)
        for name, model in _PART_MODELS.items():
            if isinstance(row, dict) and isinstance(row.get(name), dict):
                row[name] = decode(pydantic_core.to_json(row[name]), model)
        return _Stored.model_validate(row)
    except (ValueError, DecodeError):
        raise exc from None


def emitted(state: JoinState, event_id: str, offset: int | None) -> JoinState:
    """The slim state kept after emission: ids only, so late parts are recognised and the table stays small."""
    return JoinState(
        status="emitted",
        generation_id=state.generation_id,
        episode_id=state.episode_id,
        run_id=state.run_id,
        task_id=state.task_id,
        turn=state.turn,
        partition=state.partition,
        first_seen=state.first_seen,
        withheld_reported=state.withheld_reported,
        reward_event_id=event_id,
        reward_offset=offset,
    )


#: A row of the join table: a state's stored bytes, or the state itself in a table that serialises its rows
#: only when it writes them out (the Kafka engine's: once per transaction, so a generation whose parts meet in
#: one batch never serialises its pending states).
Row = bytes | JoinState


def row_bytes(row: Row) -> bytes:
    """The stored form of a row."""
    return row if isinstance(row, bytes) else row.dumps()


def row_pending(row: Row) -> bool:
    """Whether a row is a pending state (bytes: by their prefix, unparsed)."""
    return row.startswith(PENDING_PREFIX) if isinstance(row, bytes) else row.status == "pending"
